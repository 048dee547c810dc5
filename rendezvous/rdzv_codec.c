/* rdzv_codec: table-driven JSON objects (see rdzv_codec.h). */
#include "rdzv_codec.h"

#include <cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define PAIR_MAX 32 /* "A:B" of two ints, with room to spare */

static void *at(void *base, size_t off)
{
	return (char *)base + off;
}

static const void *cat(const void *base, size_t off)
{
	return (const char *)base + off;
}

static int put_field(cJSON *o, const struct rdzv_field *f, const void *src)
{
	const char *s = cat(src, f->off);
	char pair[PAIR_MAX];
	double num;

	switch (f->type) {
	case RDZV_F_INT:
		num = *(const int *)s;
		break;
	case RDZV_F_I64:
		/* Its digits, not cJSON's double: cJSON prints 15 significant
		 * digits when they read back within DBL_EPSILON, which above
		 * about 4.5e15 is off by one (a time_us; found by the fuzzer). */
		snprintf(pair, sizeof(pair), "%lld", (long long)*(const int64_t *)s);
		return cJSON_AddRawToObject(o, f->key, pair) ? 0 : -ENOMEM;
	case RDZV_F_BOOL:
		return cJSON_AddBoolToObject(o, f->key, *(const bool *)s) ? 0 : -ENOMEM;
	case RDZV_F_STR:
		if ((f->flags & RDZV_F_OPTIONAL) && s[0] == '\0')
			return 0;
		return cJSON_AddStringToObject(o, f->key, s) ? 0 : -ENOMEM;
	case RDZV_F_INT_PAIR:
		snprintf(pair, sizeof(pair), "%d:%d", *(const int *)s,
			 *(const int *)cat(src, f->off2));
		return cJSON_AddStringToObject(o, f->key, pair) ? 0 : -ENOMEM;
	default:
		return -EINVAL;
	}
	return cJSON_AddNumberToObject(o, f->key, num) ? 0 : -ENOMEM;
}

char *rdzv_codec_encode(const struct rdzv_msgdef *d, const void *src)
{
	cJSON *root = cJSON_CreateObject(), *o = root;
	char *s = NULL;
	size_t i;

	if (o != NULL && d->wrap != NULL)
		o = cJSON_AddObjectToObject(root, d->wrap);
	for (i = 0; o != NULL && i < d->nfields; i++)
		if (put_field(o, &d->fields[i], src) != 0)
			o = NULL;
	if (o != NULL)
		s = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return s;
}

/* "A:B", each in [f->min, f->max]. */
static int get_pair(const struct rdzv_field *f, const char *s, void *dst)
{
	const char *colon = strchr(s, ':');
	char a[PAIR_MAX];
	size_t l = colon ? (size_t)(colon - s) : 0;

	if (colon == NULL || strlen(s) >= PAIR_MAX)
		return -EINVAL;
	memcpy(a, s, l);
	a[l] = '\0';
	if (util_parse_int(a, (int)f->min, (int)f->max, at(dst, f->off)) != 0 ||
	    util_parse_int(colon + 1, (int)f->min, (int)f->max, at(dst, f->off2)) != 0)
		return -EINVAL;
	return 0;
}

static int get_field(const cJSON *o, const struct rdzv_field *f, void *dst)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, f->key);
	char *p = at(dst, f->off);

	if (j == NULL && (f->flags & RDZV_F_OPTIONAL)) {
		/* Only a string has an "absent" value; a table that marks another
		 * type optional is refused rather than left half-written. */
		if (f->type != RDZV_F_STR)
			return -EINVAL;
		p[0] = '\0';
		return 0;
	}
	switch (f->type) {
	case RDZV_F_INT:
	case RDZV_F_I64:
		/* The bounds also keep the conversion defined (no inf, no 1e300). */
		if (!cJSON_IsNumber(j) || !(j->valuedouble >= (double)f->min) ||
		    !(j->valuedouble <= (double)f->max))
			return -EINVAL;
		/* A count or an id is whole: 1.7 is not quietly 1. */
		if ((double)(int64_t)j->valuedouble != j->valuedouble)
			return -EINVAL;
		if (f->type == RDZV_F_INT)
			*(int *)p = (int)j->valuedouble;
		else
			*(int64_t *)p = (int64_t)j->valuedouble;
		return 0;
	case RDZV_F_BOOL:
		if (!cJSON_IsBool(j))
			return -EINVAL;
		*(bool *)p = cJSON_IsTrue(j);
		return 0;
	case RDZV_F_STR:
		if (!cJSON_IsString(j) || strlen(j->valuestring) >= f->size)
			return -EINVAL;
		strcpy(p, j->valuestring);
		return 0;
	case RDZV_F_INT_PAIR:
		return cJSON_IsString(j) ? get_pair(f, j->valuestring, dst) : -EINVAL;
	}
	return -EINVAL;
}

int rdzv_codec_decode(const struct rdzv_msgdef *d, const void *v, size_t len, void *dst)
{
	cJSON *root;
	const cJSON *o;
	int rc = 0;
	size_t i;

	if (v == NULL || len == 0 || len > RDZV_MSG_MAX)
		return -EINVAL;
	root = cJSON_ParseWithLength(v, len);
	o = d->wrap != NULL ? cJSON_GetObjectItemCaseSensitive(root, d->wrap) : root;
	if (!cJSON_IsObject(root) || !cJSON_IsObject(o))
		rc = -EINVAL;
	for (i = 0; rc == 0 && i < d->nfields; i++)
		rc = get_field(o, &d->fields[i], dst);
	cJSON_Delete(root);
	return rc;
}
