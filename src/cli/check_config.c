/*
 * check_config.c — `sluice check-config PATH`: a config validated as
 * `sluice serve --config PATH` would load it, each error FILE:LINE:COL.
 */
#include <stdio.h>
#include <string.h>

#include "../rules/config.h"
#include "cli.h"

int cmd_check_config(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    printf("usage: sluice check-config [--merge-domains] PATH\n"
           "\n"
           "Validates a config file, or a directory of *.yaml files, as\n"
           "`sluice serve --config PATH` would load it. Errors are printed\n"
           "as FILE:LINE:COL: message; the exit status is 1 if there are\n"
           "any, 0 otherwise (with a one-line summary). --merge-domains\n"
           "(or MERGE_DOMAIN_CONFIG=true) lets files share a domain, as\n"
           "serve's option of that name.\n");
    return 0;
  }
  int merge = argc == 3 && !strcmp(argv[1], "--merge-domains");
  if (argc != 2 + merge) {
    fprintf(stderr, "usage: sluice check-config [--merge-domains] PATH\n");
    return 2;
  }
  argv += merge;
  cfg_errors errs = {0};
  sl_config *cfg = config_load_opts(
      argv[1],
      merge || config_env_merge_domains() ? CFG_LOAD_MERGE_DOMAINS : 0, &errs);
  for (size_t i = 0; i < errs.n; i++) fprintf(stderr, "%s\n", errs.msgs[i]);
  cfg_errors_free(&errs);
  if (!cfg) return 1;
  printf("%s: OK: %zu domain%s, %zu rule%s\n", argv[1], cfg->ndomains,
         cfg->ndomains == 1 ? "" : "s", cfg->nlimits,
         cfg->nlimits == 1 ? "" : "s");
  config_free(cfg);
  return 0;
}
