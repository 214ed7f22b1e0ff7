// Fake HIP runtime for ckfmha's host tests (tests/data/fake_ck/README.md).
#pragma once
#include <cstdlib>

typedef int hipError_t;
typedef struct ihipStream_t* hipStream_t;
static constexpr hipError_t hipSuccess = 0;

inline hipError_t hipGetLastError() { return std::getenv("FAKE_HIP_ERROR") ? 98 : hipSuccess; }
inline hipError_t hipStreamSynchronize(hipStream_t) { return hipSuccess; }
inline const char* hipGetErrorName(hipError_t e) { return e == hipSuccess ? "hipSuccess" : "hipErrorInvalidImage"; }
inline const char* hipGetErrorString(hipError_t e) { return e == hipSuccess ? "no error" : "fake invalid image"; }
