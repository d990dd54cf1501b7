/**
 * @file launch_recorder.c
 * @brief A CUPTI injection library that writes down every kernel launch a
 *        program makes: kernel, threads per block, dynamic shared memory.
 *
 * The T4 fitness test (tests/t4/t4_fitness.py) needs to know what each launcher
 * really asks for on the T4's path, and only the launcher knows: block sizes and
 * shared memory depend on the head dimension, the dtype, the variant. So on a
 * GPU machine, each stage runs its default problem and its `--check` sweep with
 * `WB_EMULATE_T4=1` (the programs then take every decision a T4 would make:
 * compute capability 7.5, 40 SMs) and with this library injected:
 *
 *     CUDA_INJECTION64_PATH=build/tests/libwb_launch_recorder.so \
 *     WB_LAUNCH_LOG=launches.csv WB_EMULATE_T4=1 build/bin/stage06_flash_attention --check
 *
 * Every kernel launch reaches the driver (cuLaunchKernel or cuLaunchKernelEx,
 * per-thread-stream forms included, inside graph captures too), where CUPTI
 * calls us before it runs. Each distinct (kernel, block, dynamic shared memory)
 * is written once, as `program,kernel,threads,dynamic_smem_bytes`, appended to
 * WB_LAUNCH_LOG at exit. scripts/record_t4_launches.sh does all stages.
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <cupti.h>                  /* brings cuda.h and the driver calls' parameter structs */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LAUNCH_KINDS = 4096 };

typedef struct {
    char *kernel;          /* mangled name, as the cubin lists it */
    unsigned threads;      /* blockDim.x * y * z */
    unsigned dynamic_smem; /* bytes asked for at launch */
} launch_kind;

static launch_kind kinds[MAX_LAUNCH_KINDS];
static int n_kinds;

static void note_launch(const char *kernel, unsigned bx, unsigned by, unsigned bz, unsigned smem)
{
    if (!kernel) kernel = "?";
    unsigned threads = bx * by * bz;
    for (int i = 0; i < n_kinds; ++i)
        if (kinds[i].threads == threads && kinds[i].dynamic_smem == smem && strcmp(kinds[i].kernel, kernel) == 0)
            return;
    if (n_kinds == MAX_LAUNCH_KINDS) return;
    kinds[n_kinds].kernel = strdup(kernel);
    kinds[n_kinds].threads = threads;
    kinds[n_kinds].dynamic_smem = smem;
    n_kinds++;
}

static void CUPTIAPI on_driver_call(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                    const void *data)
{
    (void)userdata;
    const CUpti_CallbackData *cb = (const CUpti_CallbackData *)data;
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_ENTER) return;
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz) {
        const cuLaunchKernel_params *p = (const cuLaunchKernel_params *)cb->functionParams;
        note_launch(cb->symbolName, p->blockDimX, p->blockDimY, p->blockDimZ, p->sharedMemBytes);
    } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx ||
               cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz) {
        const CUlaunchConfig *c = ((const cuLaunchKernelEx_params *)cb->functionParams)->config;
        note_launch(cb->symbolName, c->blockDimX, c->blockDimY, c->blockDimZ, c->sharedMemBytes);
    }
}

static void write_log(void)
{
    const char *path = getenv("WB_LAUNCH_LOG");
    FILE *f = path ? fopen(path, "a") : stderr;
    if (!f) {
        perror(path);
        return;
    }
    const char *program = getenv("WB_LAUNCH_PROGRAM");
    for (int i = 0; i < n_kinds; ++i)
        fprintf(f, "%s,%s,%u,%u\n", program ? program : "?", kinds[i].kernel, kinds[i].threads,
                kinds[i].dynamic_smem);
    if (f != stderr) fclose(f);
}

/** Called by the CUDA driver when CUDA_INJECTION64_PATH names this library. */
int InitializeInjection(void)
{
    CUpti_SubscriberHandle subscriber;
    if (cuptiSubscribe(&subscriber, on_driver_call, NULL) != CUPTI_SUCCESS) {
        fprintf(stderr, "launch_recorder: cuptiSubscribe failed; no launches recorded\n");
        return 0;
    }
    const CUpti_CallbackId ids[] = {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
                                    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
                                    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; ++i)
        if (cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, ids[i]) != CUPTI_SUCCESS)
            fprintf(stderr, "launch_recorder: cannot watch driver call %u\n", (unsigned)ids[i]);
    atexit(write_log);
    return 1;
}
