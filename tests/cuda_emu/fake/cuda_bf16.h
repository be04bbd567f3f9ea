// Emulation stand-in for cuda_bf16.h (conversions from src/half.h).
#pragma once
#include "cuda_runtime.h"
#include "half.h"
struct __nv_bfloat16 { uint16_t b; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline float __bfloat162float(__nv_bfloat16 h) { return todre_bf16_to_f32(h.b); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
