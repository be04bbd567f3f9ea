// Emulation stand-in for cuda_fp16.h (conversions from src/half.h).
#pragma once
#include "cuda_runtime.h"
#include "half.h"
struct __half { uint16_t b; };
struct __half2 { __half x, y; };
inline float __half2float(__half h) { return todre_f16_to_f32(h.b); }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
