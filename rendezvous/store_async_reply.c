/* store_async_reply: how an operation of the async client ends: its reply
 * delivered to its callback, or its failure (see store_async_int.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_async_int.h"

void store_async_op_free(struct aop *op)
{
	store_buf_free(&op->req);
	free(op);
}

void store_async_op_fail(struct aop *op, int status)
{
	switch (op->kind) {
	case K_DONE:
		if (op->cb.done)
			op->cb.done(status, op->arg);
		break;
	case K_INT:
		if (op->cb.i)
			op->cb.i(status, 0, op->arg);
		break;
	case K_BYTES:
		if (op->cb.bytes)
			op->cb.bytes(status, NULL, 0, op->arg);
		break;
	case K_MULTI:
		if (op->cb.multi)
			op->cb.multi(status, 0, NULL, NULL, op->arg);
		break;
	}
	store_async_op_free(op);
}

static void deliver_multi(struct aop *op, const uint8_t *p)
{
	const void **vals = calloc(op->n ? op->n : 1, sizeof(*vals));
	size_t *lens = calloc(op->n ? op->n : 1, sizeof(*lens));
	uint64_t i;

	if (vals == NULL || lens == NULL) {
		free(vals);
		free(lens);
		store_async_op_fail(op, -ENOMEM);
		return;
	}
	for (i = 0; i < op->n; i++) {
		lens[i] = (size_t)store_get_u64(p);
		vals[i] = p + 8;
		p += 8 + lens[i];
	}
	op->cb.multi(0, (size_t)op->n, vals, lens, op->arg);
	free(vals);
	free(lens);
	store_async_op_free(op);
}

/* LIST_KEYS: the keys in the client's key space (without "/" and its
 * prefix, as TCPStore.list_keys gives them); others are left out. */
static void deliver_list(struct store_async *a, struct aop *op, const uint8_t *p)
{
	uint64_t n = store_get_u64(p), i;
	size_t pl = a->prefix ? strlen(a->prefix) : 0, got = 0;
	const void **vals = calloc(n ? n : 1, sizeof(*vals));
	size_t *lens = calloc(n ? n : 1, sizeof(*lens));

	if (vals == NULL || lens == NULL) {
		free(vals);
		free(lens);
		store_async_op_fail(op, -ENOMEM);
		return;
	}
	for (i = 0, p += 8; i < n; i++) {
		size_t l = (size_t)store_get_u64(p);
		const uint8_t *k = p + 8;

		p += 8 + l;
		if (l < 1 || k[0] != '/')
			continue;
		k++;
		l--;
		if (pl) {
			if (l < pl + 1 || memcmp(k, a->prefix, pl) != 0 || k[pl] != '/')
				continue;
			k += pl + 1;
			l -= pl + 1;
		}
		vals[got] = k;
		lens[got++] = l;
	}
	op->cb.multi(0, got, vals, lens, op->arg);
	free(vals);
	free(lens);
	store_async_op_free(op);
}

bool store_async_deliver(struct store_async *a, const uint8_t *p)
{
	struct aop *op = a->replyq;

	if (op->internal) {
		op = store_async_pop(&a->replyq, &a->replyq_tail);
		if (store_get_u32(p) != op->nonce) {
			store_async_op_free(op);
			return false;
		}
		store_async_op_free(op);
		a->state = AS_READY;
		uv_timer_stop(&a->deadline_timer);
		if (a->cbs.on_connect)
			a->cbs.on_connect(a, 0, a->cbs.arg);
		return true;
	}
	if (op->op == STORE_OP_WAIT || op->op == STORE_OP_BARRIER) {
		int st;

		if (p[0] == STORE_WAIT_STOP && op->cancel_sent) {
			op->stop_seen = true; /* the cancel's answer follows */
			return true;
		}
		if (p[0] == STORE_WAIT_STOP)
			st = 0;
		else if (p[0] == STORE_WAIT_CANCELED && op->cancel_sent)
			st = op->stop_seen ? 0 : -ETIMEDOUT;
		else
			return false;
		store_async_pop(&a->replyq, &a->replyq_tail);
		a->cur_wait = NULL;
		uv_timer_stop(&a->wait_timer);
		store_async_op_fail(op, st);
		return true;
	}
	if (op->op == STORE_OP_GET && op->phase == 0) {
		op->check = p[0];
		op->phase = 1;
		op->reply = STORE_REPLY_BYTES;
		return p[0] == STORE_CHECK_READY || p[0] == STORE_CHECK_NOT_READY;
	}
	store_async_pop(&a->replyq, &a->replyq_tail);
	switch (op->kind) {
	case K_DONE:
		if (op->op == STORE_OP_PING && store_get_u32(p) != op->nonce) {
			store_async_op_free(op);
			return false;
		}
		store_async_op_fail(op, 0);
		break;
	case K_INT: {
		int64_t v = op->reply == STORE_REPLY_U8 ? (p[0] == STORE_CHECK_READY)
							: (int64_t)store_get_u64(p);

		if (op->cb.i)
			op->cb.i(0, v, op->arg);
		store_async_op_free(op);
		break;
	}
	case K_BYTES:
		if (op->cb.bytes == NULL)
			;
		else if (op->op == STORE_OP_GET && op->check != STORE_CHECK_READY)
			op->cb.bytes(-ENOENT, NULL, 0, op->arg);
		else
			op->cb.bytes(0, p + 8, (size_t)store_get_u64(p), op->arg);
		store_async_op_free(op);
		break;
	case K_MULTI:
		if (op->cb.multi && op->op == STORE_OP_LIST_KEYS)
			deliver_list(a, op, p);
		else if (op->cb.multi)
			deliver_multi(op, p);
		else
			store_async_op_free(op);
		break;
	}
	return true;
}
