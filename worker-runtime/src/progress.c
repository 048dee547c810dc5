/* progress: the rank's collective counters in the launcher's file (see
 * progress.h). */
#include "progress.h"
#include "workenv.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct ddpi_progress_slot *slot; /* NULL: not recording */
static uint64_t seq;			/* collectives entered by this process */

/* Map this rank's slot, once; any problem just leaves recording off (the
 * launcher then treats the rank like any other program). */
static void map_slot(void)
{
	const char *path = getenv(WORKENV_DDP_PROGRESS_FILE);
	const char *lr = getenv(WORKENV_LOCAL_RANK);
	long rank;
	char *end;
	struct stat st;
	void *p;
	int fd;

	if (path == NULL || path[0] == '\0' || lr == NULL)
		return;
	rank = strtol(lr, &end, 10);
	if (*end != '\0' || rank < 0 || rank > 65535)
		return;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size < (off_t)((rank + 1) * DDPI_PROGRESS_SLOT)) {
		close(fd);
		return;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return;
	slot = (struct ddpi_progress_slot *)((char *)p + rank * DDPI_PROGRESS_SLOT);
	__atomic_store_n(&slot->pid, (int32_t)getpid(), __ATOMIC_RELAXED);
	__atomic_store_n(&slot->magic, DDPI_PROGRESS_MAGIC_EARLY, __ATOMIC_RELEASE);
}

void ddpi_progress_enter(enum ddpi_progress_op op)
{
	pthread_once(&once, map_slot);
	seq++;
	if (slot == NULL)
		return;
	__atomic_store_n(&slot->op, (uint32_t)op, __ATOMIC_RELAXED);
	__atomic_store_n(&slot->wait, (uint32_t)DDPI_WAIT_UNKNOWN, __ATOMIC_RELAXED);
	__atomic_store_n(&slot->entered, seq, __ATOMIC_RELEASE);
	if (seq == 1) /* from now on an older ddprun may read it too */
		__atomic_store_n(&slot->magic, DDPI_PROGRESS_MAGIC, __ATOMIC_RELEASE);
}

void ddpi_progress_phase(enum ddpi_progress_phase ph)
{
	pthread_once(&once, map_slot);
	if (slot == NULL)
		return;
	/* A new context: no collective of the one before is still under way
	 * (one a broken context left unmarked would hide the join). */
	if (ph == DDPI_PHASE_INIT)
		__atomic_store_n(&slot->completed, seq, __ATOMIC_RELEASE);
	__atomic_store_n(&slot->phase, (uint32_t)ph, __ATOMIC_RELEASE);
}

void ddpi_progress_wait(enum ddpi_progress_wait w)
{
	if (slot != NULL)
		__atomic_store_n(&slot->wait, (uint32_t)w, __ATOMIC_RELAXED);
}

void ddpi_progress_leave(void)
{
	if (slot != NULL)
		__atomic_store_n(&slot->completed, seq, __ATOMIC_RELEASE);
}
