// Tensor maps for TMA (tma_map.hpp). cuTensorMapEncodeTiled is a driver function: it is looked up
// through the runtime, so the library links no libcuda.
#include "cuda/sm90/tma_map.hpp"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <mutex>
#include <string>

namespace memattn::cuda::sm90 {
namespace {

constexpr std::int64_t kStrideLimit = std::int64_t(1) << 40;  // bytes, exclusive
constexpr std::int64_t kCoordLimit = std::int64_t(1) << 31;   // box coordinates are signed 32-bit

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                                           &found);
    if (e != cudaSuccess) cudaGetLastError();  // its own error only, not left for the next launch's check
    else if (found == cudaDriverEntryPointSuccess) fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  return fn;
}

std::int64_t element_bytes(DType d) { return d == DType::f32 ? 4 : 2; }

// A stride the map can hold for a dimension of `size` elements: a dimension of one element is
// never stepped along, so any valid stride stands in for its own.
bool stride_ok(std::int64_t size, std::int64_t stride_bytes) {
  return size <= 1 || (stride_bytes > 0 && stride_bytes % 16 == 0 && stride_bytes < kStrideLimit);
}

}  // namespace

bool tma_describable(const TmaTensor& t) {
  const std::int64_t e = element_bytes(t.dtype);
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) return false;
  if (t.cols * e % 16 != 0) return false;
  if (t.rows >= kCoordLimit || t.heads >= kCoordLimit || t.batch >= kCoordLimit) return false;
  return stride_ok(t.rows, t.row_stride * e) && stride_ok(t.heads, t.head_stride * e) &&
         stride_ok(t.batch, t.batch_stride * e);
}

Status make_tma_map(const TmaTensor& t, int box_rows, CUtensorMap* map) {
  if (!tma_describable(t)) return {StatusCode::internal_error, "TMA: a tensor that no tensor map can describe reached a TMA row"};
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encode_function();
  if (encode == nullptr) return {StatusCode::device_error, "TMA: the driver has no cuTensorMapEncodeTiled"};
  const std::int64_t e = element_bytes(t.dtype);
  // Strides of one-element dimensions are never used: the next dimension's extent stands in.
  const std::int64_t row_bytes = t.rows > 1 ? t.row_stride * e : t.cols * e;
  const std::int64_t head_bytes = t.heads > 1 ? t.head_stride * e : row_bytes * t.rows;
  const std::int64_t batch_bytes = t.batch > 1 ? t.batch_stride * e : head_bytes * t.heads;
  const cuuint64_t dims[4] = {cuuint64_t(t.cols), cuuint64_t(t.rows), cuuint64_t(t.heads), cuuint64_t(t.batch)};
  const cuuint64_t strides[3] = {cuuint64_t(row_bytes), cuuint64_t(head_bytes), cuuint64_t(batch_bytes)};
  const cuuint32_t box[4] = {cuuint32_t(kTmaBoxBytes / e), cuuint32_t(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = t.dtype == DType::bf16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : t.dtype == DType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                           : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  const CUresult r = encode(map, type, 4, const_cast<void*>(t.data), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return {StatusCode::device_error, "TMA: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ")"};
  return Status::Ok();
}

}  // namespace memattn::cuda::sm90
