// capstan.hpp - everything: green threads, MVars, sparks, foreign calls,
// channels, scoped async threads, sleeping and fd waits, sockets, options,
// statistics, and the synchronisation vocabulary (mutex, condition variable,
// semaphore, latch, barrier, wait group, promise/future).
#pragma once

#include "capstan/async.hpp"
#include "capstan/async_exception.hpp"
#include "capstan/barrier.hpp"
#include "capstan/condition_variable.hpp"
#include "capstan/chan.hpp"
#include "capstan/errors.hpp"
#include "capstan/foreign.hpp"
#include "capstan/future.hpp"
#include "capstan/io.hpp"
#include "capstan/latch.hpp"
#include "capstan/mutex.hpp"
#include "capstan/mvar.hpp"
#include "capstan/net.hpp"
#include "capstan/options.hpp"
#include "capstan/run.hpp"
#include "capstan/semaphore.hpp"
#include "capstan/shared_mutex.hpp"
#include "capstan/spark.hpp"
#include "capstan/statistics.hpp"
#include "capstan/thread.hpp"
#include "capstan/timeout.hpp"
#include "capstan/wait_group.hpp"
