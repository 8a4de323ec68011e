/*
 * store_error.c — what a limit does when its store (Redis) cannot answer:
 * a descriptor's `on_store_error: allow|deny|local` and `local_fraction:`
 * (a decimal or a percentage), and the daemon-wide --on-store-error flag
 * that says the same for descriptors that say nothing. Both spell the
 * modes and the fraction alike, from one table and one fraction parser.
 */
#include "rules.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const store_error_names[] = {"default", "allow", "deny",
                                                "local"};

const char *cfg_store_error_name(int mode) {
  if (mode < 0 || mode > CFG_STORE_ERROR_LOCAL) return "unknown";
  return store_error_names[mode];
}

/* The mode the n bytes of s name (any case), or DEFAULT if none. */
static int store_error_mode(const char *s, size_t n) {
  for (int m = CFG_STORE_ERROR_ALLOW; m <= CFG_STORE_ERROR_LOCAL; m++)
    if (strlen(store_error_names[m]) == n &&
        !strncasecmp(s, store_error_names[m], n))
      return m;
  return CFG_STORE_ERROR_DEFAULT;
}

/*
 * Parses a local fraction: a decimal in (0, 1] ("0.5", ".5", "1") or a
 * percentage in (0, 100] ("50%", "12.5%"); no sign, exponent or spaces.
 * Returns NULL with *out set, or what is wrong, to follow the value's name.
 */
static const char *parse_fraction(const char *s, double *out) {
  size_t digits = 0, dots = 0, i = 0;
  for (; s[i] && s[i] != '%'; i++) {
    if (s[i] == '.')
      dots++;
    else if (s[i] >= '0' && s[i] <= '9')
      digits++;
    else
      break;
  }
  int pct = s[i] == '%';
  if (pct) i++;
  if (s[i] || !digits || dots > 1)
    return "must be a decimal such as 0.5 or a percentage such as 50%";
  /* By hand, not strtod: LC_NUMERIC may want a decimal comma. One division
     at the end keeps "0.3" the double nearest 0.3. */
  double digits_v = 0, scale = 1;
  int after_dot = 0;
  for (const char *p = s; *p && *p != '%'; p++) {
    if (*p == '.') {
      after_dot = 1;
      continue;
    }
    digits_v = digits_v * 10 + (*p - '0');
    if (after_dot) scale *= 10;
  }
  double v = digits_v / (pct ? scale * 100 : scale);
  if (!(v > 0 && v <= 1))
    return "must be more than 0 and at most 1 (100%)";
  *out = v;
  return NULL;
}

int cfg_parse_store_error(const char *s, int *mode, double *fraction,
                          char *err, size_t err_len) {
  if (!err_len) err = NULL;
  if (!s) s = "";
  const char *colon = strchr(s, ':');
  size_t n = colon ? (size_t)(colon - s) : strlen(s);
  int m = store_error_mode(s, n);
  double f = CFG_LOCAL_FRACTION_DEFAULT;
  if (!m) {
    if (err)
      snprintf(err, err_len, "must be allow, deny, local or local:FRACTION, "
                             "not '%s'", s);
    return SL_EINVAL;
  }
  if (colon && m != CFG_STORE_ERROR_LOCAL) {
    if (err)
      snprintf(err, err_len, "takes a fraction only with local (e.g. "
                             "local:0.3), not '%s'", s);
    return SL_EINVAL;
  }
  if (colon) {
    const char *why = parse_fraction(colon + 1, &f);
    if (why) {
      if (err)
        snprintf(err, err_len, "local's fraction %s, not '%s'", why,
                 colon + 1);
      return SL_EINVAL;
    }
  }
  *mode = m;
  *fraction = f;
  return 0;
}

/* ---- a descriptor's keys ---- */

void rules_set_store_error(rules_loader *L, const yaml_node_t *v,
                           const rules_key *key, void *conf) {
  store_error_keys *k = (store_error_keys *)((char *)conf + key->offset);
  const char *mode = rules_scalar(L, v, key->name);
  k->mode = mode ? store_error_mode(mode, strlen(mode)) : 0;
  if (!k->mode) {
    k->bad_mode = 1;
    if (mode)
      rules_err(L, v, "on_store_error must be allow, deny or local, not '%s'",
                mode);
  }
}

void rules_set_local_fraction(rules_loader *L, const yaml_node_t *v,
                              const rules_key *key, void *conf) {
  store_error_keys *k = (store_error_keys *)((char *)conf + key->offset);
  const char *f = rules_scalar(L, v, key->name);
  const char *why = f ? parse_fraction(f, &k->fraction) : NULL;
  if (why) rules_err(L, v, "local_fraction %s, not '%s'", why, f);
  k->fraction_at = v;
}

void rules_check_store_error(rules_loader *L, const store_error_keys *k) {
  /* Checked only when both are valid, so a bad mode is reported once. */
  if (k->fraction > 0 && !k->bad_mode && k->mode != CFG_STORE_ERROR_LOCAL) {
    if (k->mode)
      rules_err(L, k->fraction_at, "local_fraction is only for "
                                   "on_store_error: local, not %s",
                cfg_store_error_name(k->mode));
    else
      rules_err(L, k->fraction_at,
                "local_fraction needs on_store_error: local");
  }
}
