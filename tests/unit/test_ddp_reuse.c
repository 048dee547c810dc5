/* Unit test of a context handle's identity: an allocator may hand the memory
 * of a finalized context straight back to the next ddp_init (glibc does when
 * nothing is allocated in between), and a stale handle must still never be
 * the live context. Linked with --wrap=calloc,free (Makefile): while armed,
 * the wrappers keep the block of a context that libddp frees and return it to
 * the next calloc of that size, as such an allocator would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_internal.h"

void *__real_calloc(size_t n, size_t size);
void __real_free(void *p);
void *__wrap_calloc(size_t n, size_t size);
void __wrap_free(void *p);

static int armed;
static void *last_ctx; /* the last context-sized block calloc gave */
static void *kept;     /* that block, freed, waiting for the next calloc */

void *__wrap_calloc(size_t n, size_t size)
{
	if (armed && n == 1 && size == sizeof(struct ddp_ctx)) {
		if (kept) {
			void *p = kept;
			kept = NULL;
			return memset(p, 0, size);
		}
		return last_ctx = __real_calloc(n, size);
	}
	return __real_calloc(n, size);
}

void __wrap_free(void *p)
{
	if (armed && p && p == last_ctx && !kept) {
		kept = p;
		return;
	}
	__real_free(p);
}

static struct ddp_ctx *world_of_one(void)
{
	struct ddp_options o;
	struct ddp_ctx *ctx = NULL;

	unsetenv("RANK");
	unsetenv("WORLD_SIZE");
	unsetenv("MASTER_ADDR");
	unsetenv("MASTER_PORT");
	ddp_options_init(&o);
	o.backend = DDP_BACKEND_CPU;
	o.quiet = 1;
	assert_int_equal(ddp_init(&o, &ctx), 0);
	return ctx;
}

/* init a, finalize a, init b at a's address: the stale a was the live
 * context, so ddp_finalize(a) returned 0 and tore b down, whose next call
 * failed "no context (NULL or finalized)". */
static void test_a_stale_context_never_becomes_the_next_one(void **state)
{
	struct ddp_ctx *a, *b;
	float x = 1;

	armed = 1;
	a = world_of_one();
	assert_int_equal(ddp_finalize(a), 0);
	b = world_of_one();
	armed = 0;
	assert_ptr_not_equal(a, b);
	assert_int_equal(ddp_finalize(a), -EINVAL);
	assert_non_null(strstr(ddp_errmsg(), "ddp_finalize: not a live context"));
	assert_int_equal(ddp_barrier(a), -EINVAL);
	assert_int_equal(ddp_all_reduce(b, &x, 1, DDP_FLOAT32, DDP_SUM), 0);
	assert_true(x == 1);
	assert_int_equal(ddp_finalize(b), 0);
	if (kept)
		__real_free(kept);
	kept = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_stale_context_never_becomes_the_next_one),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
