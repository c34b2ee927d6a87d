// Internal CPU allocator (see allocator.cpp); declared in lockstep/core/pool.h.
#pragma once

#include "lockstep/core/pool.h"
