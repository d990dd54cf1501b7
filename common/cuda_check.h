/**
 * @file cuda_check.h
 * @brief Every CUDA call and every kernel launch checked, naming the call and %file:line.
 *
 * CUDA reports errors in two places: the return value of each runtime call, and,
 * for kernels, a sticky error that appears at launch (bad configuration) or at the
 * next synchronizing call (a fault inside the kernel). WB_CUDA_CHECK covers the
 * first, WB_CHECK_LAUNCH the launch itself. Set `CUDA_LAUNCH_BLOCKING=1` in the
 * environment to make every launch synchronous while hunting a fault: the error
 * then names the launch that caused it.
 */
#ifndef WB_CUDA_CHECK_H
#define WB_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Print `CUDA error at %file:line in <call>: <error name>: <message>` and exit(1).
 * @param err  the error returned by the call
 * @param call the call's source text
 * @param file source file of the call
 * @param line source line of the call
 */
void wb_cuda_fail(cudaError_t err, const char *call, const char *file, int line);

#ifdef __cplusplus
}
#endif

/** @brief Run a CUDA runtime call; on failure name the call and %file:line, then exit(1). */
#define WB_CUDA_CHECK(call)                                             \
    do {                                                                \
        cudaError_t wb_err_ = (call);                                   \
        if (wb_err_ != cudaSuccess)                                     \
            wb_cuda_fail(wb_err_, #call, __FILE__, __LINE__);           \
    } while (0)

/**
 * @brief Check the launch just made (right after `kernel<<<...>>>(...)`).
 *
 * Catches configuration errors (too many threads, too much shared memory) at
 * once; faults inside the kernel surface at the next synchronizing WB_CUDA_CHECK.
 * @param kernel_name the kernel's name, a string literal, for the message
 */
#define WB_CHECK_LAUNCH(kernel_name)                                    \
    do {                                                                \
        cudaError_t wb_err_ = cudaGetLastError();                       \
        if (wb_err_ != cudaSuccess)                                     \
            wb_cuda_fail(wb_err_, "launch of " kernel_name, __FILE__, __LINE__); \
    } while (0)

#endif /* WB_CUDA_CHECK_H */
