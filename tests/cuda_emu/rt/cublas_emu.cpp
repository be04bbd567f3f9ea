// CPU emulation of cublasGemmEx / cublasGemmStridedBatchedEx and the handle
// calls libtodre-cuda makes (see fake/cublas_v2.h). Written from the cuBLAS
// documentation, not from the backend: column-major operands, op(A) is
// m x k, op(B) is k x n, C is m x n with leading dimension ldc.
#include <cstdio>
#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "half.h"

struct cublasContext {
  void *ctx = nullptr;  // the CUDA context current at cublasCreate
  cudaStream_t stream = nullptr;
  void *workspace = nullptr;
  size_t workspace_bytes = 0;
};

namespace {

size_t type_size(cudaDataType_t t) {
  switch (t) {
  case CUDA_R_32F: return 4;
  case CUDA_R_16F:
  case CUDA_R_16BF: return 2;
  }
  return 0;
}

double load(const void *base, cudaDataType_t t, size_t i) {
  switch (t) {
  case CUDA_R_32F: return ((const float *)base)[i];
  case CUDA_R_16F: return todre_f16_to_f32(((const uint16_t *)base)[i]);
  case CUDA_R_16BF: return todre_bf16_to_f32(((const uint16_t *)base)[i]);
  }
  return 0;
}

// Element count a column-major rows x cols operand with leading dimension ld
// spans: the last element is (rows - 1) + (cols - 1) * ld.
size_t span(int rows, int cols, long long ld) {
  if (rows == 0 || cols == 0) return 0;
  return (size_t)(rows - 1) + (size_t)(cols - 1) * (size_t)ld + 1;
}

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const void *alpha, const void *A, cudaDataType_t At, int lda,
                    long long sA, const void *B, cudaDataType_t Bt, int ldb, long long sB,
                    const void *beta, void *C, cudaDataType_t Ct, int ldc, long long sC,
                    int batch, cublasComputeType_t ct, const char *name) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (emu::bind_ctx_opaque() != h->ctx) {
    emu::violation("%s: the handle was created in CUDA context %p, but context %p is current",
                   name, h->ctx, emu::bind_ctx_opaque());
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  // Argument checks in the order the documentation lists them.
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) ||
      m < 0 || n < 0 || k < 0 || batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  if (lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!type_size(At) || !type_size(Bt) || Ct != CUDA_R_32F || At != Bt)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the subset this emulator implements
  if (ct != CUBLAS_COMPUTE_32F && ct != CUBLAS_COMPUTE_32F_FAST_16F &&
      ct != CUBLAS_COMPUTE_32F_FAST_16BF && ct != CUBLAS_COMPUTE_32F_FAST_TF32)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  // Every batch's operands must lie in device memory.
  for (int b = 0; b < batch; b++) {
    const char *Ab = (const char *)A + (size_t)b * sA * type_size(At);
    const char *Bb = (const char *)B + (size_t)b * sB * type_size(Bt);
    char *Cb = (char *)C + (size_t)b * sC * 4;
    bool ok = k == 0 || (emu::device_range(Ab, span(a_rows, a_cols, lda) * type_size(At)) &&
                         emu::device_range(Bb, span(b_rows, b_cols, ldb) * type_size(Bt)));
    ok = ok && emu::device_range(Cb, span(m, n, ldc) * 4);
    if (!ok) {
      emu::violation("%s: batch %d: an operand is not inside one device allocation "
                     "(m=%d n=%d k=%d lda=%d ldb=%d ldc=%d)", name, b, m, n, k, lda, ldb, ldc);
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (!h->workspace) {
    emu::violation("%s on a handle without a user workspace: cuBLAS would allocate its own "
                   "(cublasSetStream() drops the workspace; set it again)", name);
  }
  emu::count_blas();
  // Default pointer mode: alpha and beta are host scalars, read at the call.
  double al = *(const float *)alpha, be = *(const float *)beta;
  cudaError_t e = emu::enqueue(h->stream, [=] {
    for (int b = 0; b < batch; b++) {
      const char *Ab = (const char *)A + (size_t)b * sA * type_size(At);
      const char *Bb = (const char *)B + (size_t)b * sB * type_size(Bt);
      float *Cb = (float *)C + (size_t)b * sC;
      for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
          double s = 0;
          for (int l = 0; l < k; l++) {
            size_t ai = ta == CUBLAS_OP_N ? (size_t)i + (size_t)l * lda : (size_t)l + (size_t)i * lda;
            size_t bi = tb == CUBLAS_OP_N ? (size_t)l + (size_t)j * ldb : (size_t)j + (size_t)l * ldb;
            s += load(Ab, At, ai) * load(Bb, Bt, bi);
          }
          float *c = Cb + (size_t)i + (size_t)j * ldc;
          // beta == 0: C is not read (it may hold NaN), as documented.
          *c = (float)(al * s + (be == 0 ? 0.0 : be * (double)*c));
        }
    }
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *handle) {
  emu::count_blas_handle();
  *handle = new cublasContext();
  (*handle)->ctx = emu::bind_ctx_opaque();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  cudaDeviceSynchronize();
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
// Documented: setting the stream resets the user workspace to the default
// pool, so a workspace must be set again after every cublasSetStream().
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  handle->workspace = nullptr;
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes && !emu::device_range(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
const char *cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
const char *cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType_t Atype, int lda, const void *B,
                            cudaDataType_t Btype, int ldb, const void *beta, void *C,
                            cudaDataType_t Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
              Ctype, ldc, 0, 1, computeType, "cublasGemmEx");
}
cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType_t Atype, int lda, long long int strideA,
    const void *B, cudaDataType_t Btype, int ldb, long long int strideB, const void *beta, void *C,
    cudaDataType_t Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
              strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType,
              "cublasGemmStridedBatchedEx");
}

}  // extern "C"
