/* toolgate schema validate | test-suite: the JSON Schema 2020-12 validator for people
 * debugging a tool schema, and the runner of the official test suite. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/cleanup.h"
#include "util/json.h"

#define SCHEMA_FILE_MAX (16 * 1024 * 1024)
#define VIOLATIONS_SHOWN 1000

static const char usage[] =
    "usage: toolgate schema validate --schema FILE --instance FILE\n"
    "       toolgate schema test-suite DIR [--exclusions FILE] [--remotes DIR]\n"
    "                                      [--metaschemas DIR] [--verbose]\n\n"
    "validate    prints each violation (instance pointer, schema pointer, keyword), up to 1000,\n"
    "            and exits 1 when the instance is invalid, 0 when it is valid\n"
    "test-suite  runs a folder of the official JSON-Schema-Test-Suite (draft2020-12); ends with\n"
    "            'N passed, M failed'; exits 1 when a test not listed in --exclusions fails\n";

static json_t *load_json_file(const char *path) {
  _cleanup_free_ char *text = cli_read_file(path, SCHEMA_FILE_MAX);
  if (!text) return NULL;
  _cleanup_free_ char *why = NULL;
  json_t *value = tg_json_parse(text, SCHEMA_FILE_MAX, &why);
  if (!value) fprintf(stderr, "toolgate: %s: %s\n", path, why ? why : "out of memory");
  return value;
}

static int schema_validate(cli *c, int argc, char **argv) {
  static const struct option options[] = {{"schema", required_argument, NULL, 's'},
                                          {"instance", required_argument, NULL, 'i'},
                                          {0}};
  const char *schema_path = NULL, *instance_path = NULL;
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "schema validate", &seen)) != -1) {
    if (opt == 's') schema_path = optarg;
    else if (opt == 'i') instance_path = optarg;
    else return cli_usage(usage, "schema validate: bad option");
  }
  if (optind < argc || !schema_path || !instance_path)
    return cli_usage(usage, "schema validate: --schema and --instance are required");
  _cleanup_json_ json_t *schema = load_json_file(schema_path);
  _cleanup_json_ json_t *instance = schema ? load_json_file(instance_path) : NULL;
  if (!instance) return CLI_FAILED;
  tg_schema *compiled = NULL;
  _cleanup_free_ char *why = NULL;
  if (tg_schema_compile(schema, NULL, &compiled, &why) < 0) {
    fprintf(stderr, "toolgate: %s does not compile: %s\n", schema_path, why ? why : "out of memory");
    return CLI_FAILED;
  }
  _cleanup_json_ json_t *errors = json_array();
  /* One past what is printed, to know whether more were left out. */
  bool valid = tg_schema_validate(compiled, instance, errors, VIOLATIONS_SHOWN + 1);
  tg_schema_free(compiled);
  bool more = json_array_size(errors) > VIOLATIONS_SHOWN;
  if (more) json_array_remove(errors, VIOLATIONS_SHOWN);
  size_t i;
  json_t *e;
  json_array_foreach(errors, i, e) {
    printf("%s: %s (keyword %s at %s)\n", *json_string_value(json_object_get(e, "instancePath"))
                                              ? json_string_value(json_object_get(e, "instancePath"))
                                              : "(root)",
           json_string_value(json_object_get(e, "message")),
           json_string_value(json_object_get(e, "keyword")),
           json_string_value(json_object_get(e, "schemaPath")));
  }
  if (more) printf("(more violations than the %d shown)\n", VIOLATIONS_SHOWN);
  printf("%s\n", valid ? "valid" : "invalid");
  return valid ? CLI_OK : CLI_FAILED;
}

static int schema_test_suite(cli *c, int argc, char **argv) {
  static const struct option options[] = {{"exclusions", required_argument, NULL, 'e'},
                                          {"remotes", required_argument, NULL, 'r'},
                                          {"metaschemas", required_argument, NULL, 'm'},
                                          {"verbose", no_argument, NULL, 'v'},
                                          {0}};
  tg_schema_suite_options opts = {0};
  int opt;
  unsigned long long seen = 0;
  while ((opt = cli_getopt(argc, argv, options, NULL, "schema test-suite", &seen)) != -1) {
    switch (opt) {
    case 'e': opts.exclusions_path = optarg; break;
    case 'r': opts.remotes_dir = optarg; break;
    case 'm': opts.metaschema_dir = optarg; break;
    case 'v': opts.verbose = true; break;
    default: return cli_usage(usage, "schema test-suite: bad option");
    }
  }
  if (optind + 1 != argc) return cli_usage(usage, "schema test-suite: give one DIR");
  tg_schema_suite_result result = {0};
  if (tg_schema_suite_run(argv[optind], &opts, stdout, &result) < 0) {
    fprintf(stderr, "toolgate: cannot run the suite in %s\n", argv[optind]);
    return CLI_FAILED;
  }
  return result.failed == 0 ? CLI_OK : CLI_FAILED;
}

int cmd_schema(cli *c, int argc, char **argv) {
  static const cli_command subs[] = {{"validate", schema_validate, NULL},
                                     {"test-suite", schema_test_suite, NULL}};
  return cli_dispatch(c, argc, argv, subs, 2, usage);
}
