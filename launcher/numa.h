/* numa: --numa-binding, torchrun 2.x's CPU binding of each worker to the
 * CPUs near its GPU (torch/numa/binding.py's four modes):
 *   node          every allowed CPU of the GPU's NUMA node
 *   socket        every allowed CPU of the socket that holds that node
 *   exclusive     the node's physical cores split evenly between the GPUs
 *                 on that node (whole cores, hyperthreads together)
 *   core-complex  one group of cores sharing the last-level cache per GPU
 *                 (the largest groups first; round robin when GPUs outnumber
 *                 them)
 * Worker local_rank uses GPU CUDA_VISIBLE_DEVICES[local_rank] (or local_rank
 * when unset), GPUs numbered as NVIDIA display/3D controllers in PCI bus
 * order (CUDA_DEVICE_ORDER=PCI_BUS_ID's order). "Allowed" is ddprun's own
 * affinity. The topology is read from sysfs (under $DDP_SYSFS_ROOT if set:
 * a test's fake tree). Unlike torchrun, which raises, a machine without the
 * topology runs the workers unpinned after one warning (numa_plan's why). */
#ifndef DDP_NUMA_H
#define DDP_NUMA_H

#include <sched.h>
#include <stddef.h>

#include "cli.h"

/* Fill sets[0..nproc) (one CPU set per local rank). 0, or a negative errno
 * (-ENODEV: no GPU or no topology, -ERANGE: a worker has no GPU, -ENOMEM)
 * with why, one clause for a warning: then nothing is pinned. */
int numa_plan(enum cli_numa mode, const char *cvd, int nproc, cpu_set_t *sets, char *why,
	      size_t whylen);

#endif
