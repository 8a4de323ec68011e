/*
 * calendar.h — calendar-aligned windows for quotas sold per day, week,
 * month or year (`calendar: month` in a rate limit), in a time zone: UTC
 * by default, a fixed offset ("+05:30") or an IANA zone ("Europe/Berlin")
 * read from the system's tz database.
 *
 * The epoch-aligned windows of `unit:` (a month is 30 days from the
 * epoch, as envoyproxy/ratelimit counts it) stay as they are; a calendar
 * window starts at local midnight of the 1st of the month (the day, the
 * Monday, the 1st of January) and ends at the next one, so its length
 * varies: 28 to 31 days, 23 or 25 hours across a DST change.
 *
 * Time zones: the C library's localtime_r reads the zone from the
 * process-wide TZ, which no thread can switch safely while others run.
 * GLib's GTimeZone (libglib2.0) reads the same system tzdata
 * (/usr/share/zoneinfo) into an immutable object that any number of
 * threads may use at once, and GDate does the civil calendar arithmetic
 * (month lengths, leap years); both are well kept and in Debian.
 */
#ifndef SLUICE_RULES_CALENDAR_H
#define SLUICE_RULES_CALENDAR_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A calendar unit (CAL_NONE: the limit has none). */
enum { CAL_NONE = 0, CAL_DAY, CAL_WEEK, CAL_MONTH, CAL_YEAR };

/* The nominal period of a calendar limit's policy: at least its longest
   window (a month of 31 days and a DST hour), so that a key's state is
   never dropped as fresh before its window ends. */
#define CAL_DAY_MAX_NS (INT64_C(25) * 3600 * 1000000000)
#define CAL_WEEK_MAX_NS ((int64_t)(7 * 24 + 1) * 3600 * 1000000000)
#define CAL_MONTH_MAX_NS ((int64_t)(31 * 24 + 1) * 3600 * 1000000000)
#define CAL_YEAR_MAX_NS ((int64_t)(366 * 24 + 1) * 3600 * 1000000000)

typedef struct cfg_calendar {
  int unit;     /* CAL_* */
  char *tz;     /* as configured ("UTC" when not) */
  void *zone;   /* its GTimeZone */
  /* The last window found: start and end in seconds since the epoch, in
     one word (start << 32 | end - start), so that readers on any thread
     see a whole pair. The only field written after the load. */
  _Atomic uint64_t cache;
} cfg_calendar;

/* The unit named s ("day", "week", "month", "year", any case), or
   CAL_NONE. */
int cal_unit_of(const char *s);

/* "day", "week", "month" or "year". */
const char *cal_unit_name(int unit);

/* The longest window of unit (CAL_*_MAX_NS). */
int64_t cal_max_ns(int unit);

/*
 * Sets c for unit in zone tz (NULL: UTC): 0, or -1 when the zone is not
 * one the tz database knows (nor UTC, nor a "+hh:mm" offset), with a
 * message in err.
 */
int cal_init(cfg_calendar *c, int unit, const char *tz, char *err,
             size_t err_len);

/* Frees what cal_init made. */
void cal_free(cfg_calendar *c);

/*
 * The calendar window that holds now_ns: [*start_ns, *end_ns), both at
 * local midnight of c's zone. Thread-safe (the last window is cached).
 * 0, or -1 when now_ns is outside what GLib's calendar covers (the years
 * 1 to 9999).
 */
int cal_window(const cfg_calendar *c, int64_t now_ns, int64_t *start_ns,
               int64_t *end_ns);

#endif /* SLUICE_RULES_CALENDAR_H */
