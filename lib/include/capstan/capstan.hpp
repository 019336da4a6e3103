// capstan.hpp - everything: green threads, MVars, sparks, foreign calls,
// channels, scoped async threads, sleeping and fd waits, sockets, options, statistics.
#pragma once

#include "capstan/async.hpp"
#include "capstan/async_exception.hpp"
#include "capstan/chan.hpp"
#include "capstan/errors.hpp"
#include "capstan/foreign.hpp"
#include "capstan/io.hpp"
#include "capstan/mvar.hpp"
#include "capstan/net.hpp"
#include "capstan/options.hpp"
#include "capstan/run.hpp"
#include "capstan/spark.hpp"
#include "capstan/statistics.hpp"
#include "capstan/thread.hpp"
#include "capstan/timeout.hpp"
