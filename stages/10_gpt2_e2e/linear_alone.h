/**
 * @file stages/10_gpt2_e2e/linear_alone.h
 * @brief The decode step's linear layer alone — the GEMV lesson: v1's
 *        small-M linear and v2's fused decode linear, checked against the CPU
 *        reference at odd sizes and timed against the copy roof.
 */
#ifndef STAGE10_LINEAR_ALONE_H
#define STAGE10_LINEAR_ALONE_H

#include "args.h"
#include "device.h"
#include "report.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief --check: both kernels, fp32 and fp16, M = 1, 3, 8, odd N and K not a
 *        multiple of a round of loads; v2's also with its LayerNorm prologue,
 *        and in fp16 on sm_80 its batch path at 3-64 rows (the batch linear, with a
 *        folded LayerNorm and with the residual epilogue too, and past 768 inputs the
 *        skinny linear with its second pass).
 *        Prints a line per case.
 * @param variant the --variant given (-1: all), as stage 10's variants number them
 * @param dtype_choice --dtype: 0 both, 1 fp32, 2 fp16
 * @param checks  incremented per case
 * @return the number of failed cases
 */
int check_linears_alone(int variant, int dtype_choice, int *checks);

/**
 * @brief --bench: one table per GPT-2 decode shape (M = 1: QKV 768×2304, fc-proj
 *        3072×768, the LM head 768×50257), each kernel's GB/s against the copy roof
 *        (the L2 flushed before every timed run: the weights come from DRAM), in
 *        the precisions --dtype chooses (0 both, 1 fp32, 2 fp16).
 */
void bench_linears_alone(const wb_device *dev, const wb_common_opts *opt, int dtype_choice, wb_report *rep);

#ifdef __cplusplus
}
#endif

#endif /* STAGE10_LINEAR_ALONE_H */
