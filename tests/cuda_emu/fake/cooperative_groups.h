// Emulation stand-in: cooperative groups live in cuda_runtime.h.
#pragma once
#include "cuda_runtime.h"
