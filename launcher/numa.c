/* numa: the CPU set of each worker under --numa-binding (see numa.h). */
#include "numa.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NUMA_MAX_GPUS 256

struct topo {
	const char *root;
	char gpu[NUMA_MAX_GPUS][32]; /* PCI addresses, bus order */
	int ngpu;
	cpu_set_t allowed;
};

/* Read root+path into buf (NUL-terminated). 0 or -errno. */
static int read_sys(const struct topo *t, const char *path, char *buf, size_t len)
{
	char full[4096];
	FILE *f;
	size_t n;

	snprintf(full, sizeof(full), "%s%s", t->root, path);
	f = fopen(full, "re");
	if (f == NULL)
		return -errno;
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
	return 0;
}

static int read_int(const struct topo *t, const char *path, long *out)
{
	char buf[64], *end;
	int rc = read_sys(t, path, buf, sizeof(buf));

	if (rc != 0)
		return rc;
	*out = strtol(buf, &end, 0);
	return end == buf ? -EINVAL : 0;
}

/* "0-3,8,10-11\n" into set. 0 or -EINVAL. */
static int parse_cpulist(const char *s, cpu_set_t *set)
{
	CPU_ZERO(set);
	while (*s != '\0' && *s != '\n') {
		char *end;
		long a = strtol(s, &end, 10), b = a;

		if (end == s || a < 0)
			return -EINVAL;
		if (*end == '-') {
			s = end + 1;
			b = strtol(s, &end, 10);
			if (end == s || b < a)
				return -EINVAL;
		}
		for (; a <= b && a < CPU_SETSIZE; a++)
			CPU_SET((int)a, set);
		s = end;
		if (*s == ',')
			s++;
	}
	return 0;
}

static int read_cpulist(const struct topo *t, const char *path, cpu_set_t *set)
{
	char buf[8192];
	int rc = read_sys(t, path, buf, sizeof(buf));

	return rc != 0 ? rc : parse_cpulist(buf, set);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* NVIDIA (vendor 0x10de) VGA or 3D controllers (class 0x0300xx, 0x0302xx). */
static int find_gpus(struct topo *t)
{
	char dir[4096], path[512];
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/sys/bus/pci/devices", t->root);
	d = opendir(dir);
	if (d == NULL)
		return -ENODEV;
	t->ngpu = 0;
	while ((e = readdir(d)) != NULL && t->ngpu < NUMA_MAX_GPUS) {
		long vendor, cls;

		if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(t->gpu[0]))
			continue;
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/vendor", e->d_name);
		if (read_int(t, path, &vendor) != 0 || vendor != 0x10de)
			continue;
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/class", e->d_name);
		if (read_int(t, path, &cls) != 0 || (cls >> 8 != 0x0300 && cls >> 8 != 0x0302))
			continue;
		strcpy(t->gpu[t->ngpu++], e->d_name);
	}
	closedir(d);
	qsort(t->gpu, (size_t)t->ngpu, sizeof(t->gpu[0]), cmp_str);
	return t->ngpu > 0 ? 0 : -ENODEV;
}

/* The physical GPU of visible device v. -ERANGE if there is none. */
static int visible_gpu(const struct topo *t, const char *cvd, int v)
{
	const char *p = cvd;
	char *end;
	long g;
	int i;

	if (cvd == NULL)
		return v < t->ngpu ? v : -ERANGE;
	for (i = 0; i < v; i++) {
		p = strchr(p, ',');
		if (p == NULL)
			return -ERANGE;
		p++;
	}
	g = strtol(p, &end, 10);
	if (end == p || g < 0 || g >= t->ngpu)
		return -ERANGE; /* a UUID, or beyond the GPUs found */
	return (int)g;
}

static int count_visible(const struct topo *t, const char *cvd)
{
	int n = 0;

	while (visible_gpu(t, cvd, n) >= 0)
		n++;
	return n;
}

static int gpu_node(const struct topo *t, int g)
{
	char path[256];
	long node;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", t->gpu[g]);
	if (read_int(t, path, &node) != 0 || node < 0)
		return 0; /* one node: the kernel says -1 */
	return (int)node;
}

static int node_cpus(const struct topo *t, int node, cpu_set_t *set)
{
	char path[128];
	int rc;

	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
	rc = read_cpulist(t, path, set);
	if (rc == 0)
		CPU_AND(set, set, &t->allowed);
	return rc;
}

/* A per-CPU key: the lowest CPU of the list at path (with %d = cpu). */
static int cpu_key(const struct topo *t, const char *fmt, int cpu)
{
	char path[256];
	cpu_set_t s;
	int c;

	snprintf(path, sizeof(path), fmt, cpu);
	if (read_cpulist(t, path, &s) != 0)
		return cpu;
	for (c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &s))
			return c;
	return cpu;
}

/* The last-level data or unified cache's shared_cpu_list path of cpu. */
static void llc_fmt(const struct topo *t, int cpu, char *fmt, size_t len)
{
	char path[256], buf[64];
	long level, best = -1;
	int i;

	snprintf(fmt, len, "/nonexistent/%%d");
	for (i = 0; i < 16; i++) {
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/type",
			 cpu, i);
		if (read_sys(t, path, buf, sizeof(buf)) != 0)
			continue;
		if (strncmp(buf, "Unified", 7) != 0 && strncmp(buf, "Data", 4) != 0)
			continue;
		snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/level",
			 cpu, i);
		if (read_int(t, path, &level) != 0 || level <= best)
			continue;
		best = level;
		snprintf(fmt, len, "/sys/devices/system/cpu/cpu%%d/cache/index%d/shared_cpu_list",
			 i);
	}
}

struct group {
	int key;
	cpu_set_t cpus;
};

/* Group the CPUs of set by key (the siblings' or cache's lowest CPU), in key
 * order. Returns the number of groups (at most CPU_SETSIZE). */
static int group_cpus(const struct topo *t, const cpu_set_t *set, bool by_cache, struct group *g)
{
	char fmt[256];
	int n = 0, c, k;

	for (c = 0; c < CPU_SETSIZE; c++) {
		int key;

		if (!CPU_ISSET(c, set))
			continue;
		if (by_cache)
			llc_fmt(t, c, fmt, sizeof(fmt));
		else
			snprintf(fmt, sizeof(fmt),
				 "/sys/devices/system/cpu/cpu%%d/topology/thread_siblings_list");
		key = cpu_key(t, fmt, c);
		for (k = 0; k < n && g[k].key != key; k++)
			;
		if (k == n) {
			g[n].key = key;
			CPU_ZERO(&g[n].cpus);
			n++;
		}
		CPU_SET(c, &g[k].cpus);
	}
	return n;
}

static int cmp_group_size(const void *a, const void *b)
{
	const struct group *x = a, *y = b;
	int dx = CPU_COUNT(&x->cpus), dy = CPU_COUNT(&y->cpus);

	if (dx != dy)
		return dy - dx; /* larger first */
	return x->key - y->key;
}

static int socket_cpus(const struct topo *t, int node, cpu_set_t *set)
{
	char path[128];
	cpu_set_t mine;
	long pkg, p;
	int c, first = -1, rc = node_cpus(t, node, &mine);

	if (rc != 0)
		return rc;
	for (c = 0; c < CPU_SETSIZE && first < 0; c++)
		if (CPU_ISSET(c, &mine))
			first = c;
	if (first < 0)
		return -ENODEV;
	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
		 first);
	if (read_int(t, path, &pkg) != 0)
		return -ENODEV;
	CPU_ZERO(set);
	for (c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &t->allowed))
			continue;
		snprintf(path, sizeof(path),
			 "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
		if (read_int(t, path, &p) == 0 && p == pkg)
			CPU_SET(c, set);
	}
	return 0;
}

/* exclusive / core-complex: the share of visible device v among the visible
 * devices on its node. */
static int share_cpus(const struct topo *t, const char *cvd, enum cli_numa mode, int v,
		      cpu_set_t *set)
{
	struct group *g;
	cpu_set_t node_set;
	int node = gpu_node(t, visible_gpu(t, cvd, v)), nvis = count_visible(t, cvd);
	int rel = 0, ndev = 0, i, n, rc;

	for (i = 0; i < nvis; i++)
		if (gpu_node(t, visible_gpu(t, cvd, i)) == node) {
			if (i < v)
				rel++;
			ndev++;
		}
	rc = node_cpus(t, node, &node_set);
	if (rc != 0)
		return rc;
	g = malloc(sizeof(*g) * CPU_SETSIZE);
	if (g == NULL)
		return -ENOMEM;
	n = group_cpus(t, &node_set, mode == CLI_NUMA_CCX, g);
	CPU_ZERO(set);
	if (mode == CLI_NUMA_CCX && n > 0) {
		qsort(g, (size_t)n, sizeof(*g), cmp_group_size);
		*set = g[rel % n].cpus;
	} else if (n >= ndev) {
		int per = n / ndev, extra = n % ndev;
		int start = rel * per + (rel < extra ? rel : extra);
		int end = start + per + (rel < extra ? 1 : 0);

		for (i = start; i < end; i++)
			CPU_OR(set, set, &g[i].cpus);
	}
	free(g);
	return CPU_COUNT(set) > 0 ? 0 : -ENODEV;
}

int numa_plan(enum cli_numa mode, const char *cvd, int nproc, cpu_set_t *sets, char *why,
	      size_t whylen)
{
	struct topo *t = calloc(1, sizeof(*t));
	int lr, rc = 0;

	if (t == NULL)
		return -ENOMEM;
	t->root = getenv("DDP_SYSFS_ROOT") ? getenv("DDP_SYSFS_ROOT") : "";
	if (sched_getaffinity(0, sizeof(t->allowed), &t->allowed) != 0)
		CPU_ZERO(&t->allowed);
	if (find_gpus(t) != 0) {
		snprintf(why, whylen, "no NVIDIA GPU in %s/sys/bus/pci/devices", t->root);
		free(t);
		return -ENODEV;
	}
	for (lr = 0; lr < nproc && rc == 0; lr++) {
		int g = visible_gpu(t, cvd, lr);

		if (g < 0) {
			snprintf(why, whylen, "local rank %d has no GPU among the %d found%s", lr,
				 t->ngpu, cvd ? " (by CUDA_VISIBLE_DEVICES index)" : "");
			rc = -ERANGE;
			break;
		}
		if (mode == CLI_NUMA_NODE)
			rc = node_cpus(t, gpu_node(t, g), &sets[lr]);
		else if (mode == CLI_NUMA_SOCKET)
			rc = socket_cpus(t, gpu_node(t, g), &sets[lr]);
		else
			rc = share_cpus(t, cvd, mode, lr, &sets[lr]);
		if (rc == 0 && CPU_COUNT(&sets[lr]) == 0)
			rc = -ENODEV;
		if (rc != 0)
			snprintf(why, whylen,
				 "no CPUs found for GPU %s (NUMA node %d) of local rank %d in "
				 "%s/sys/devices/system",
				 t->gpu[g], gpu_node(t, g), lr, t->root);
	}
	free(t);
	return rc;
}
