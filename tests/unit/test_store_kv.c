/* Unit tests for rendezvous/store_kv.c: PyTorch TCPStore semantics of the key
 * table (ADD keeps decimal text, COMPARE_SET's three cases, queues) and the
 * parked waiters: woken by every write that creates their last missing key,
 * never by polling, and gone when cancelled. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_kv.h"
#include "store_proto.h"

#define K(s) (const uint8_t *)(s), strlen(s)

struct events {
	int woken;
	void *last_owner;
	int watch_types[8];
	int nwatch;
};

static void on_woken(struct store_waiter *w, void *arg)
{
	struct events *ev = arg;

	ev->woken++;
	ev->last_owner = w->owner;
}

static void on_watch(struct store_watch *w, int type, const uint8_t *key, size_t klen,
		     const uint8_t *old, size_t oldlen, const uint8_t *nv, size_t nvlen, void *arg)
{
	struct events *ev = arg;

	if (ev->nwatch < 8)
		ev->watch_types[ev->nwatch] = type;
	ev->nwatch++;
}

struct fixture {
	struct store_kv *kv;
	struct events ev;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct store_kv_events e = {.woken = on_woken, .watch = on_watch, .arg = &f->ev};

	assert_int_equal(store_kv_new(&e, &f->kv), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	store_kv_free(f->kv);
	free(f);
	return 0;
}

#define KV(state) (((struct fixture *)*(state))->kv)
#define EV(state) (&((struct fixture *)*(state))->ev)

/* A key list as the parser presents it. */
static const uint8_t *keylist(struct store_buf *b, const char *const *keys, size_t n)
{
	size_t i;

	b->len = 0;
	for (i = 0; i < n; i++)
		store_put_bytes(b, keys[i], strlen(keys[i]));
	return b->p;
}

static void assert_value(struct store_kv *kv, const char *key, const char *want)
{
	size_t len;
	const uint8_t *v = store_kv_get(kv, K(key), &len);

	assert_non_null(v);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(v, want, len);
}

static void test_set_get_delete_count(void **state)
{
	struct store_kv *kv = KV(state);
	size_t len;

	assert_null(store_kv_get(kv, K("a"), &len));
	assert_int_equal(store_kv_set(kv, K("a"), K("1")), 0);
	assert_int_equal(store_kv_set(kv, K("b"), K("")), 0);
	assert_value(kv, "a", "1");
	assert_value(kv, "b", "");
	assert_int_equal(store_kv_num_keys(kv), 2);
	assert_int_equal(store_kv_set(kv, K("a"), K("2")), 0);
	assert_value(kv, "a", "2");
	assert_int_equal(store_kv_num_keys(kv), 2);
	assert_int_equal(store_kv_delete(kv, K("a")), 1);
	assert_int_equal(store_kv_delete(kv, K("a")), 0);
	assert_null(store_kv_get(kv, K("a"), &len));
	assert_int_equal(store_kv_num_keys(kv), 1);
}

static void test_add_keeps_decimal_text(void **state)
{
	struct store_kv *kv = KV(state);
	int64_t r = 0;

	assert_int_equal(store_kv_add(kv, K("n"), 5, &r), 0);
	assert_int_equal(r, 5);
	assert_int_equal(store_kv_add(kv, K("n"), -7, &r), 0);
	assert_int_equal(r, -2);
	assert_value(kv, "n", "-2");
	/* std::stoll rules: leading space, trailing junk ignored. */
	store_kv_set(kv, K("t"), K(" 12abc"));
	assert_int_equal(store_kv_add(kv, K("t"), 1, &r), 0);
	assert_int_equal(r, 13);
	store_kv_set(kv, K("bad"), K("abc"));
	assert_int_equal(store_kv_add(kv, K("bad"), 1, &r), -EINVAL);
	assert_value(kv, "bad", "abc");
	/* Past int64 the sum wraps around, as PyTorch's stoll(old) + delta. */
	store_kv_set(kv, K("big"), K("9223372036854775807"));
	assert_int_equal(store_kv_add(kv, K("big"), 1, &r), 0);
	assert_true(r == INT64_MIN);
	assert_value(kv, "big", "-9223372036854775808");
	assert_int_equal(store_kv_add(kv, K("big"), -1, &r), 0);
	assert_true(r == INT64_MAX);
	assert_value(kv, "big", "9223372036854775807");
	assert_int_equal(store_kv_add(kv, K("big"), INT64_MIN, &r), 0);
	assert_true(r == -1);
	store_kv_set(kv, K("huge"), K("99999999999999999999"));
	assert_int_equal(store_kv_add(kv, K("huge"), 0, &r), -ERANGE);
}

static void test_compare_set_three_cases(void **state)
{
	struct store_kv *kv = KV(state);
	const uint8_t *cur;
	size_t len;

	/* Missing key, empty expected: stores desired, returns it. */
	assert_int_equal(store_kv_compare_set(kv, K("c"), K(""), K("d1"), &cur, &len), 0);
	assert_memory_equal(cur, "d1", len);
	assert_value(kv, "c", "d1");
	/* Missing key, non-empty expected: returns expected, stores nothing. */
	assert_int_equal(store_kv_compare_set(kv, K("m"), K("e"), K("d"), &cur, &len), 0);
	assert_int_equal(len, 1);
	assert_memory_equal(cur, "e", 1);
	assert_null(store_kv_get(kv, K("m"), &len));
	/* Present: swaps when equal, returns the current value either way. */
	assert_int_equal(store_kv_compare_set(kv, K("c"), K("d1"), K("d2"), &cur, &len), 0);
	assert_int_equal(len, 2);
	assert_memory_equal(cur, "d2", 2);
	assert_int_equal(store_kv_compare_set(kv, K("c"), K("zz"), K("d3"), &cur, &len), 0);
	assert_memory_equal(cur, "d2", 2);
	assert_value(kv, "c", "d2");
}

static void test_append(void **state)
{
	struct store_kv *kv = KV(state);

	assert_int_equal(store_kv_append(kv, K("l"), K("ab")), 0);
	assert_int_equal(store_kv_append(kv, K("l"), K("cd")), 0);
	assert_value(kv, "l", "abcd");
}

static void test_waiter_woken_by_each_creating_write(void **state)
{
	struct store_kv *kv = KV(state);
	struct events *ev = EV(state);
	struct store_buf b;
	struct store_waiter *w;
	const char *keys[] = {"s", "a", "cs", "ap", "q"};
	const uint8_t *cur;
	size_t len, i;
	int owner;
	int64_t r;

	store_buf_init(&b);
	for (i = 0; i < 5; i++) {
		assert_int_equal(store_kv_wait(kv, keylist(&b, &keys[i], 1), 1, &owner, &w), 0);
		assert_ptr_equal(w->owner, &owner);
	}
	/* Placeholders for waited keys are not keys. */
	assert_int_equal(store_kv_num_keys(kv), 0);
	assert_false(store_kv_check(kv, keylist(&b, &keys[0], 1), 1));
	store_kv_set(kv, K("s"), K("1"));
	assert_int_equal(ev->woken, 1);
	store_kv_add(kv, K("a"), 1, &r);
	assert_int_equal(ev->woken, 2);
	store_kv_compare_set(kv, K("cs"), K(""), K("x"), &cur, &len);
	assert_int_equal(ev->woken, 3);
	store_kv_append(kv, K("ap"), K("x"));
	assert_int_equal(ev->woken, 4);
	store_kv_queue_push(kv, K("q"), K("x"));
	assert_int_equal(ev->woken, 5);
	assert_ptr_equal(ev->last_owner, &owner);
	/* A key that exists answers at once, without parking. */
	assert_int_equal(store_kv_wait(kv, keylist(&b, &keys[0], 1), 1, &owner, &w), 1);
	store_buf_free(&b);
}

static void test_multi_key_waiter_needs_all(void **state)
{
	struct store_kv *kv = KV(state);
	struct events *ev = EV(state);
	struct store_buf b;
	struct store_waiter *w;
	const char *keys[] = {"x", "y", "x", "z"}; /* a duplicate, one present */
	int owner;

	store_buf_init(&b);
	store_kv_set(kv, K("z"), K("ready"));
	assert_int_equal(store_kv_wait(kv, keylist(&b, keys, 4), 4, &owner, &w), 0);
	assert_int_equal(w->remaining, 3);
	store_kv_set(kv, K("x"), K("1"));
	assert_int_equal(ev->woken, 0);
	/* A delete of a satisfied key does not re-arm it (as in PyTorch). */
	store_kv_delete(kv, K("x"));
	store_kv_set(kv, K("y"), K("2"));
	assert_int_equal(ev->woken, 1);
	/* An update of an existing key wakes nobody new. */
	store_kv_set(kv, K("y"), K("3"));
	assert_int_equal(ev->woken, 1);
	store_buf_free(&b);
}

static void test_cancelled_waiter_never_woken(void **state)
{
	struct store_kv *kv = KV(state);
	struct events *ev = EV(state);
	struct store_buf b;
	struct store_waiter *w1, *w2;
	const char *keys[] = {"k", "other"};
	int o1, o2;

	store_buf_init(&b);
	assert_int_equal(store_kv_wait(kv, keylist(&b, keys, 2), 2, &o1, &w1), 0);
	assert_int_equal(store_kv_wait(kv, keylist(&b, keys, 1), 1, &o2, &w2), 0);
	store_kv_waiter_cancel(kv, w1);
	store_kv_set(kv, K("k"), K("v"));
	assert_int_equal(ev->woken, 1);
	assert_ptr_equal(ev->last_owner, &o2);
	store_kv_set(kv, K("other"), K("v"));
	assert_int_equal(ev->woken, 1);
	store_buf_free(&b);
}

static void test_free_with_parked_waiters(void **state)
{
	struct store_kv *kv = KV(state);
	struct store_buf b;
	struct store_waiter *w;
	const char *keys[] = {"p", "q", "r"};
	int owner;

	/* Partly satisfied and untouched waiters both go with the table
	 * (ASan checks that nothing leaks or is freed twice). */
	store_buf_init(&b);
	assert_int_equal(store_kv_wait(kv, keylist(&b, keys, 3), 3, &owner, &w), 0);
	assert_int_equal(store_kv_wait(kv, keylist(&b, keys, 1), 1, &owner, &w), 0);
	store_kv_set(kv, K("q"), K("v"));
	store_buf_free(&b);
}

static void test_queue_fifo_and_wakes_one(void **state)
{
	struct store_kv *kv = KV(state);
	struct events *ev = EV(state);
	struct store_buf b;
	struct store_waiter *w;
	const char *keys[] = {"jobs"};
	int o1, o2;
	int64_t n;
	uint8_t *v;
	size_t vl;

	store_buf_init(&b);
	assert_int_equal(store_kv_queue_len(kv, K("jobs")), 0);
	assert_int_equal(store_kv_wait(kv, keylist(&b, keys, 1), 1, &o1, &w), 0);
	assert_int_equal(store_kv_wait(kv, keylist(&b, keys, 1), 1, &o2, &w), 0);
	store_kv_queue_push(kv, K("jobs"), K("one"));
	assert_int_equal(ev->woken, 1);
	assert_ptr_equal(ev->last_owner, &o1);
	store_kv_queue_push(kv, K("jobs"), K("two"));
	assert_int_equal(ev->woken, 2);
	assert_ptr_equal(ev->last_owner, &o2);
	/* A non-empty queue counts as present for CHECK, not as a key. */
	assert_true(store_kv_check(kv, keylist(&b, keys, 1), 1));
	assert_int_equal(store_kv_num_keys(kv), 0);
	assert_int_equal(store_kv_queue_len(kv, K("jobs")), 2);
	assert_int_equal(store_kv_queue_pop(kv, K("jobs"), &n, &v, &vl), 0);
	assert_int_equal(n, 2);
	assert_memory_equal(v, "one", vl);
	free(v);
	assert_int_equal(store_kv_queue_pop(kv, K("jobs"), &n, &v, &vl), 0);
	assert_memory_equal(v, "two", vl);
	free(v);
	assert_int_equal(store_kv_queue_pop(kv, K("jobs"), &n, &v, &vl), 0);
	assert_int_equal(n, 0);
	assert_false(store_kv_check(kv, keylist(&b, keys, 1), 1));
	store_buf_free(&b);
}

static void test_watch_events(void **state)
{
	struct store_kv *kv = KV(state);
	struct events *ev = EV(state);
	struct store_watch *w;
	int owner;
	int64_t r;

	assert_int_equal(store_kv_watch(kv, K("w"), &owner, &w), 0);
	store_kv_set(kv, K("w"), K("1"));
	store_kv_add(kv, K("w"), 1, &r);
	store_kv_delete(kv, K("w"));
	assert_int_equal(ev->nwatch, 3);
	assert_int_equal(ev->watch_types[0], STORE_WATCH_CREATED);
	assert_int_equal(ev->watch_types[1], STORE_WATCH_UPDATED);
	assert_int_equal(ev->watch_types[2], STORE_WATCH_DELETED);
	store_kv_unwatch(kv, w);
	store_kv_set(kv, K("w"), K("2"));
	assert_int_equal(ev->nwatch, 3);
}

static void test_many_keys_grow_table(void **state)
{
	struct store_kv *kv = KV(state);
	char key[32];
	int i;

	for (i = 0; i < 20000; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		assert_int_equal(store_kv_set(kv, K(key), K(key)), 0);
	}
	assert_int_equal(store_kv_num_keys(kv), 20000);
	for (i = 0; i < 20000; i += 997) {
		snprintf(key, sizeof(key), "key-%d", i);
		assert_value(kv, key, key);
	}
}

/* The server lets one reply pass the buffer limit by this much. */
static void test_value_bytes_counts_every_value(void **state)
{
	struct store_kv *kv = KV(state);
	int64_t r;

	assert_int_equal(store_kv_value_bytes(kv), 0);
	store_kv_set(kv, K("a"), K("abc"));
	assert_int_equal(store_kv_append(kv, K("a"), K("de")), 0); /* in place */
	assert_int_equal(store_kv_append(kv, K("b"), K("x")), 0);  /* creates */
	assert_int_equal(store_kv_value_bytes(kv), 6);
	store_kv_set(kv, K("a"), K("z"));
	assert_int_equal(store_kv_add(kv, K("n"), 100, &r), 0);
	assert_int_equal(store_kv_value_bytes(kv), 5);
	assert_int_equal(store_kv_queue_push(kv, K("q"), K("queued")), 0);
	assert_int_equal(store_kv_value_bytes(kv), 5);
	assert_int_equal(store_kv_delete(kv, K("n")), 1);
	assert_int_equal(store_kv_value_bytes(kv), 2);
	assert_int_equal(store_kv_clear(kv, NULL), 0);
	assert_int_equal(store_kv_value_bytes(kv), 0);
}

static void test_append_stops_at_the_value_limit(void **state)
{
	struct store_kv *kv = KV(state);

	store_kv_limit_value(kv, 4);
	assert_int_equal(store_kv_append(kv, K("l"), K("ab")), 0);
	assert_int_equal(store_kv_append(kv, K("l"), K("cd")), 0);
	assert_int_equal(store_kv_append(kv, K("l"), K("e")), -EFBIG);
	assert_value(kv, "l", "abcd");
}

static void test_barrier_counts_parks_and_releases_all(void **state)
{
	struct store_kv *kv = KV(state);
	struct events *ev = EV(state);
	struct store_waiter *w1, *w2, *w3, *ww;
	struct store_buf b;
	const char *k = "bar";
	int o1, o2, o3;
	int64_t n;

	store_buf_init(&b);
	/* A WAIT on the key is woken by the first arrival (it creates it). */
	assert_int_equal(store_kv_wait(kv, keylist(&b, &k, 1), 1, &o3, &ww), 0);
	assert_int_equal(store_kv_barrier(kv, K("bar"), 3, &o1, &n, &w1), 0);
	assert_int_equal(n, 1);
	assert_int_equal(ev->woken, 1);
	assert_value(kv, "bar", "1");
	/* A caller with another world size parks on the same key. */
	assert_int_equal(store_kv_barrier(kv, K("bar"), 4, &o2, &n, &w2), 0);
	/* Other writes of the key release nobody. */
	assert_int_equal(store_kv_add(kv, K("bar"), 0, &n), 0);
	assert_int_equal(ev->woken, 1);
	assert_int_equal(store_kv_barrier(kv, K("bar"), 3, &o3, &n, &w3), 1);
	assert_int_equal(n, 3);
	assert_int_equal(ev->woken, 3); /* both parked callers */
	assert_value(kv, "bar", "3");
	/* At or past the world size: released at once. */
	assert_int_equal(store_kv_barrier(kv, K("bar"), 2, &o3, &n, &w3), 1);
	assert_int_equal(store_kv_barrier(kv, K("w0"), 0, &o3, &n, &w3), 1);
	/* A canceled caller is never released; the key stays a counter. */
	assert_int_equal(store_kv_barrier(kv, K("c"), 2, &o1, &n, &w1), 0);
	store_kv_waiter_cancel(kv, w1);
	assert_int_equal(store_kv_barrier(kv, K("c"), 2, &o2, &n, &w2), 1);
	assert_int_equal(ev->woken, 3);
	/* ADD's errors. */
	store_kv_set(kv, K("txt"), K("abc"));
	assert_int_equal(store_kv_barrier(kv, K("txt"), 2, &o1, &n, &w1), -EINVAL);
	store_kv_set(kv, K("max"), K("99999999999999999999"));
	assert_int_equal(store_kv_barrier(kv, K("max"), 2, &o1, &n, &w1), -ERANGE);
	/* Parked at free time: freed with the table (the teardown). */
	assert_int_equal(store_kv_barrier(kv, K("left"), 2, &o1, &n, &w1), 0);
	store_buf_free(&b);
}

static void test_list_keys_value_keys_only(void **state)
{
	struct store_kv *kv = KV(state);
	struct store_waiter *w;
	struct store_buf b, l;
	const char *k = "waited";
	const uint8_t *pos, *it;
	size_t il, bytes, seen = 0;
	int owner, i;

	store_buf_init(&b);
	store_buf_init(&l);
	assert_int_equal(store_kv_list_keys(kv, &l, 1024, &bytes), 0);
	assert_int_equal(l.len, 8);
	assert_int_equal((int64_t)store_get_u64(l.p), 0);
	store_kv_set(kv, K("a"), K("1"));
	store_kv_set(kv, K("bb"), K(""));
	store_kv_queue_push(kv, K("q"), K("x"));
	assert_int_equal(store_kv_wait(kv, keylist(&b, &k, 1), 1, &owner, &w), 0);
	store_kv_set(kv, K("del"), K("x"));
	store_kv_delete(kv, K("del"));
	l.len = 0;
	assert_int_equal(store_kv_list_keys(kv, &l, 1024, &bytes), 0);
	assert_int_equal(bytes, 8 + 9 + 10);
	assert_int_equal(l.len, bytes);
	assert_int_equal((int64_t)store_get_u64(l.p), 2);
	pos = l.p + 8;
	for (i = 0; i < 2; i++) {
		store_list_next(&pos, &it, &il);
		seen |= il == 1 && it[0] == 'a' ? 1 : il == 2 && memcmp(it, "bb", 2) == 0 ? 2 : 4;
	}
	assert_int_equal(seen, 3);
	/* Over the bound: refused, nothing written. */
	l.len = 0;
	assert_int_equal(store_kv_list_keys(kv, &l, 26, &bytes), -E2BIG);
	assert_int_equal(bytes, 27);
	assert_int_equal(l.len, 0);
	store_kv_waiter_cancel(kv, w);
	store_buf_free(&b);
	store_buf_free(&l);
}

/* A restart's workers get an empty store: values and queues go (but those
 * under the kept prefix, ddprun's own), a parked waiter stays parked and is
 * woken by a later set. */
static void test_clear_drops_values_and_queues_keeps_waiters(void **state)
{
	struct store_kv *kv = KV(state);
	struct store_waiter *w;
	struct store_buf b;
	const char *k = "later";
	int64_t qlen;
	size_t vlen;
	int owner, i;
	char key[16];

	store_buf_init(&b);
	for (i = 0; i < 100; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		store_kv_set(kv, (const uint8_t *)key, strlen(key), K("v"));
	}
	store_kv_queue_push(kv, K("q"), K("x"));
	store_kv_queue_push(kv, K("q"), K("y"));
	assert_int_equal(store_kv_wait(kv, keylist(&b, &k, 1), 1, &owner, &w), 0);
	store_kv_set(kv, K("ddprun/x"), K("kept"));
	assert_int_equal(store_kv_clear(kv, "ddprun/"), 0);
	assert_int_equal(store_kv_num_keys(kv), 1);
	assert_non_null(store_kv_get(kv, K("ddprun/x"), &vlen));
	assert_int_equal(store_kv_clear(kv, NULL), 0);
	assert_int_equal(store_kv_num_keys(kv), 0);
	assert_null(store_kv_get(kv, K("k7"), NULL));
	assert_int_equal(store_kv_queue_len(kv, K("q")), 0);
	assert_int_equal(store_kv_queue_pop(kv, K("q"), &qlen, NULL, NULL), 0);
	assert_int_equal(qlen, 0);
	store_kv_set(kv, K("later"), K("1"));
	assert_int_equal(((struct fixture *)*state)->ev.woken, 1);
	store_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_set_get_delete_count, setup, teardown),
		cmocka_unit_test_setup_teardown(test_add_keeps_decimal_text, setup, teardown),
		cmocka_unit_test_setup_teardown(test_compare_set_three_cases, setup, teardown),
		cmocka_unit_test_setup_teardown(test_append, setup, teardown),
		cmocka_unit_test_setup_teardown(test_waiter_woken_by_each_creating_write, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_multi_key_waiter_needs_all, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancelled_waiter_never_woken, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_with_parked_waiters, setup, teardown),
		cmocka_unit_test_setup_teardown(test_queue_fifo_and_wakes_one, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watch_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_keys_grow_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_value_bytes_counts_every_value, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_append_stops_at_the_value_limit, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_barrier_counts_parks_and_releases_all, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_list_keys_value_keys_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clear_drops_values_and_queues_keeps_waiters,
						setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
