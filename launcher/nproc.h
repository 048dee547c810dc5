/* nproc: the number behind --nproc-per-node gpu|cpu|auto.
 *
 * gpu counts the CUDA devices the driver shows this process (it honours
 * CUDA_VISIBLE_DEVICES). The count is taken in a short-lived child that
 * dlopens libcuda.so.1, so ddprun has no build-time CUDA dependency and never
 * carries a CUDA context (threads, memory) into its own process. cpu counts
 * the CPUs this process may run on (its affinity mask, as torchrun's
 * torch._utils.cpu_count(); the online CPUs if the mask cannot be read);
 * auto is gpu when there is one, else cpu. */
#ifndef DDP_NPROC_H
#define DDP_NPROC_H

#include <stddef.h>

#include "cli.h"

int nproc_cpus(void);
/* >= 0 devices, or a negative errno with a reason in err (no driver). */
int nproc_gpus(char *err, size_t errlen);
/* The number of local workers for o; 0 or -ENODEV/-errno with err set. */
int nproc_resolve(const struct cli_opts *o, int *n, char *err, size_t errlen);

#endif
