/* config.h: configuration files of long options (nmt-train --config FILE).
 *
 * A configuration file holds one option a line as `key: value` or `key = value`, where key is a
 * long option's name without the dashes; an option without an argument takes true/yes/1 (given)
 * or false/no/0 (not given). Blank lines and lines whose first non-blank character is '#' are
 * skipped; the value is the rest of the line with surrounding blanks removed (a '#' inside it is
 * data). A key may appear once. Options on the command line come after the file's, so they win. */
#ifndef NMT_CONFIG_H
#define NMT_CONFIG_H

#include "cli/opt.h"

/* Expands every --config FILE (or --config=FILE) of ARGV (ARGC entries) into the options FILE
 * holds, placed before the command line's: *NARGV (*NARGC entries, NULL-terminated) is ARGV[0],
 * the files' options as "--key=value" or "--key", then the rest of ARGV. The keys are the long
 * names of the entries of the option table SPEC that opt_in_config accepts; others (unknown, or
 * "help") are refused. Free the result with config_args_free.
 * 0, or -1 with the error set ("FILE:LINE: ..."; out of memory). */
int config_args(int argc, char **argv, const struct opt_spec *spec, int *nargc, char ***nargv);
/* Frees what config_args returned. */
void config_args_free(int argc, char **argv);

#endif
