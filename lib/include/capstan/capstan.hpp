// capstan.hpp - everything: green threads, MVars, sparks, foreign calls, options,
// statistics.
#pragma once

#include "capstan/errors.hpp"
#include "capstan/foreign.hpp"
#include "capstan/mvar.hpp"
#include "capstan/options.hpp"
#include "capstan/run.hpp"
#include "capstan/spark.hpp"
#include "capstan/statistics.hpp"
#include "capstan/thread.hpp"
