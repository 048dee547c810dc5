/* report_time: when a failure happened (see report.h): the clock, the
 * error file's mtime, and the timestamp inside it read as torchrun's int()
 * reads it, kept only where it cannot mislead. */
#include "report.h"

#include <cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

/* A string as Python's int() reads it in base 10: ASCII whitespace around
 * it, a sign, digits with single underscores between them. Non-ASCII digits
 * and spaces, which int() also takes, are not (no writer puts them in a
 * timestamp). More than 18 digits: false (no time a worker lived in). */
static bool py_int_text(const char *s, int64_t *out)
{
	bool neg = false;
	int64_t v = 0;
	int digits = 0;

	while (*s == ' ' || (*s >= '\t' && *s <= '\r'))
		s++;
	if (*s == '+' || *s == '-')
		neg = *s++ == '-';
	for (;; s++) {
		if (*s == '_' && digits > 0 && s[1] >= '0' && s[1] <= '9')
			continue;
		if (*s < '0' || *s > '9')
			break;
		if (++digits > 18)
			return false;
		v = v * 10 + (*s - '0');
	}
	while (*s == ' ' || (*s >= '\t' && *s <= '\r'))
		s++;
	if (digits == 0 || *s != '\0')
		return false;
	*out = neg ? -v : v;
	return true;
}

/* torchrun's int(timestamp): a JSON number (one with a fraction cut toward
 * zero, as int() cuts a float), true or false (1, 0), or a string int()
 * reads. Anything else (null, text that is no integer, an overflow) makes
 * torchrun's own report raise: false here, the caller falls back. */
bool report_timestamp_of(const struct cJSON *v, int64_t *out)
{
	if (cJSON_IsBool(v)) {
		*out = cJSON_IsTrue(v) ? 1 : 0;
		return true;
	}
	if (cJSON_IsNumber(v)) {
		if (!isfinite(v->valuedouble) || fabs(v->valuedouble) >= 1e18)
			return false;
		*out = (int64_t)v->valuedouble;
		return true;
	}
	return cJSON_IsString(v) && py_int_text(v->valuestring, out);
}

/* Whole seconds of an epoch time in microseconds, rounded down. */
static int64_t floor_s(int64_t us)
{
	return us / 1000000 - (us % 1000000 < 0);
}

/* torchrun dates a failure by the timestamp in its error file: so does the
 * summary, when that second lies between the worker's start and time_us
 * (the file's mtime or the observation). One outside (negative, 1970 from
 * a "1", a stale file, the far future) would mislead: time_us stays. Within
 * time_us's own second, time_us keeps its microseconds for the order. */
int64_t report_dated_us(int64_t ts, int64_t started_us, int64_t time_us)
{
	if (ts == REPORT_NO_TIMESTAMP || ts < floor_s(started_us) || ts > floor_s(time_us))
		return time_us;
	return ts == floor_s(time_us) ? time_us : ts * 1000000;
}

int64_t report_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t report_start_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t report_failure_time_us(const char *error_file, int64_t started_us, int64_t now_us)
{
	struct stat st;
	int64_t wrote;

	if (error_file == NULL || stat(error_file, &st) != 0)
		return now_us;
	wrote = (int64_t)st.st_mtim.tv_sec * 1000000 + st.st_mtim.tv_nsec / 1000;
	return wrote >= started_us && wrote < now_us ? wrote : now_us;
}
