/*
 * calendar.c — calendar-aligned windows in a time zone (calendar.h): the
 * local date of an instant, the first day of its day, week (ISO: weeks
 * start on Monday), month or year, and the local midnights that start it
 * and the next one, converted back to instants by GLib's GTimeZone.
 */
#include "calendar.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const unit_names[] = {"", "day", "week", "month", "year"};

int cal_unit_of(const char *s) {
  for (int u = CAL_DAY; u <= CAL_YEAR; u++)
    if (!strcasecmp(s, unit_names[u])) return u;
  return CAL_NONE;
}

const char *cal_unit_name(int unit) {
  return unit >= CAL_DAY && unit <= CAL_YEAR ? unit_names[unit] : "none";
}

int64_t cal_max_ns(int unit) {
  static const int64_t max[] = {0, CAL_DAY_MAX_NS, CAL_WEEK_MAX_NS,
                                CAL_MONTH_MAX_NS, CAL_YEAR_MAX_NS};
  return unit >= CAL_DAY && unit <= CAL_YEAR ? max[unit] : 0;
}

int cal_init(cfg_calendar *c, int unit, const char *tz, char *err,
             size_t err_len) {
  memset(c, 0, sizeof *c);
  const char *name = tz ? tz : "UTC";
  /* g_time_zone_new_identifier: NULL for a zone the tz database (or the
     "+hh:mm" syntax) does not know, where g_time_zone_new would quietly
     give UTC. */
  GTimeZone *z = g_time_zone_new_identifier(name);
  if (!z) {
    snprintf(err, err_len,
             "unknown time zone '%s' (expected UTC, an offset such as "
             "+05:30, or a tz database name such as Europe/Berlin)",
             name);
    return -1;
  }
  c->unit = unit;
  c->zone = z;
  c->tz = strdup(name);
  if (!c->tz) {
    g_time_zone_unref(z);
    c->zone = NULL;
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  return 0;
}

void cal_free(cfg_calendar *c) {
  if (c->zone) g_time_zone_unref(c->zone);
  free(c->tz);
  c->zone = NULL;
  c->tz = NULL;
}

/* Local midnight of date d in zone z, as seconds since the epoch; -1 when
   GLib cannot represent it. A midnight that a DST change skips becomes
   the first instant after the gap (GLib moves a time in a gap forward). */
static int64_t midnight(GTimeZone *z, const GDate *d) {
  GDateTime *t = g_date_time_new(z, g_date_get_year(d), g_date_get_month(d),
                                 g_date_get_day(d), 0, 0, 0);
  if (!t) return -1;
  int64_t s = g_date_time_to_unix(t);
  g_date_time_unref(t);
  return s;
}

/* The window holding `sec` (seconds since the epoch) in c's zone. */
static int window_of(const cfg_calendar *c, int64_t sec, int64_t *start,
                     int64_t *end) {
  GDateTime *utc = g_date_time_new_from_unix_utc(sec);
  GDateTime *local = utc ? g_date_time_to_timezone(utc, c->zone) : NULL;
  if (utc) g_date_time_unref(utc);
  if (!local) return -1;
  int y, m, d;
  g_date_time_get_ymd(local, &y, &m, &d);
  int dow = g_date_time_get_day_of_week(local); /* 1 Monday .. 7 Sunday */
  g_date_time_unref(local);
  GDate first, next;
  g_date_clear(&first, 1);
  g_date_set_dmy(&first, (GDateDay)d, (GDateMonth)m, (GDateYear)y);
  switch (c->unit) {
  case CAL_WEEK:
    g_date_subtract_days(&first, (guint)(dow - 1));
    break;
  case CAL_MONTH:
    g_date_set_day(&first, 1);
    break;
  case CAL_YEAR:
    g_date_set_dmy(&first, 1, G_DATE_JANUARY, (GDateYear)y);
    break;
  }
  next = first;
  switch (c->unit) {
  case CAL_DAY:
    g_date_add_days(&next, 1);
    break;
  case CAL_WEEK:
    g_date_add_days(&next, 7);
    break;
  case CAL_MONTH:
    g_date_add_months(&next, 1);
    break;
  default:
    g_date_add_years(&next, 1);
  }
  *start = midnight(c->zone, &first);
  *end = midnight(c->zone, &next);
  /* (A midnight in a gap moved past `sec` cannot happen: the gap's own
     instant maps to after it. Guard all the same.) */
  return *start < 0 || *end <= *start || sec < *start || sec >= *end ? -1 : 0;
}

int cal_window(const cfg_calendar *c, int64_t now_ns, int64_t *start_ns,
               int64_t *end_ns) {
  int64_t sec = now_ns / 1000000000;
  uint64_t w = atomic_load_explicit(&c->cache, memory_order_relaxed);
  int64_t s = (int64_t)(w >> 32), e = s + (int64_t)(w & 0xffffffffu);
  if (!w || sec < s || sec >= e) {
    if (window_of(c, sec, &s, &e)) return -1;
    /* Cached when it fits one word (until 2106): a later window, or one
       further back, is simply computed each time. */
    if (s >= 0 && s <= UINT32_MAX && e - s <= UINT32_MAX)
      atomic_store_explicit(&((cfg_calendar *)c)->cache,
                            (uint64_t)s << 32 | (uint64_t)(e - s),
                            memory_order_relaxed);
  }
  *start_ns = s * 1000000000;
  *end_ns = e * 1000000000;
  return 0;
}
