/*
 * Python.h for building CPython-style C extensions against refbridge: put
 * refbridge/include/compat on the include path and `#include <Python.h>` (or
 * "Python.h") gives refbridge_python.h, the memory-management subset of CPython's API.
 */
#ifndef REFBRIDGE_COMPAT_PYTHON_H
#define REFBRIDGE_COMPAT_PYTHON_H
#include "../refbridge_python.h"
#endif
