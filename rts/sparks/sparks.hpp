// sparks.hpp - spark threads and the runtime half of spark<R>::get (the
// inline half is in lib/include/capstan/spark.hpp).  The pools are in
// sparks/pool.hpp.
#pragma once

#include "sparks/pool.hpp"
