/* Stage-1 fixture manifest and array loading (see fixture.h). */
#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tt_select_data_dir(void)
{
    static char dir[4096];
    const char *base = getenv("TODRE_TEST_DATA");
    if (!base || !base[0]) {
        fprintf(stderr, "TODRE_TEST_DATA is not set: run through ctest, which generates the "
                        "fixtures (test select.fixtures) first\n");
        return NULL;
    }
    snprintf(dir, sizeof dir, "%s/select", base);
    return dir;
}

static int parse_dtype(const char *v, todre_dtype *out)
{
    if (!strcmp(v, "f32")) *out = TODRE_DTYPE_F32;
    else if (!strcmp(v, "f16")) *out = TODRE_DTYPE_F16;
    else if (!strcmp(v, "bf16")) *out = TODRE_DTYPE_BF16;
    else return -1;
    return 0;
}

static int parse_field(struct tt_case *c, const char *key, const char *v)
{
    long long x = strtoll(v, NULL, 10);
    if (!strcmp(key, "name")) snprintf(c->name, sizeof c->name, "%s", v);
    else if (!strcmp(key, "n")) c->n = x;
    else if (!strcmp(key, "d")) c->d = x;
    else if (!strcmp(key, "dtype")) return parse_dtype(v, &c->dtype);
    else if (!strcmp(key, "cls_dtype")) return parse_dtype(v, &c->cls_dtype);
    else if (!strcmp(key, "cls"))
        c->cls_kind = !strcmp(v, "flat") ? TT_CLS_FLAT : !strcmp(v, "video") ? TT_CLS_VIDEO : TT_CLS_NONE;
    else if (!strcmp(key, "frames")) c->frames = x;
    else if (!strcmp(key, "objective")) c->objective = (todre_objective)x;
    else if (!strcmp(key, "pivot")) c->pivot = (todre_pivot)x;
    else if (!strcmp(key, "lo")) c->lo = x;
    else if (!strcmp(key, "hi")) c->hi = x;
    else if (!strcmp(key, "seed")) c->seed = x;
    else if (!strcmp(key, "keep")) c->keep = x;
    else if (!strcmp(key, "ratio")) c->ratio = strtod(v, NULL);
    else if (!strcmp(key, "k")) c->k = x;
    else if (!strcmp(key, "pad")) c->pad = x;
    else if (!strcmp(key, "exact")) c->exact = (int)x;
    else return -1;
    return 0;
}

static int parse_line(char *line, struct tt_case *c)
{
    memset(c, 0, sizeof *c);
    for (char *tok = strtok(line, " \t\r\n"); tok; tok = strtok(NULL, " \t\r\n")) {
        char *eq = strchr(tok, '=');
        if (!eq) return -1;
        *eq = '\0';
        if (parse_field(c, tok, eq + 1) != 0) return -1;
    }
    return c->name[0] && c->n > 0 && c->d > 0 && c->k > 0 ? 0 : -1;
}

int tt_cases_read(const char *dir, struct tt_case **cases, size_t *count, char *err, size_t cap)
{
    char path[4200], line[1024];
    snprintf(path, sizeof path, "%s/cases.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, cap, "%s: cannot open (fixtures not generated?)", path);
        return -1;
    }
    size_t n = 0, cap_cases = 16;
    struct tt_case *arr = malloc(cap_cases * sizeof *arr);
    int rc = arr ? 0 : -1;
    for (int lineno = 1; rc == 0 && fgets(line, sizeof line, f); lineno++) {
        if (line[0] == '\n' || line[0] == '#') continue;
        if (n == cap_cases) {
            struct tt_case *grown = realloc(arr, 2 * cap_cases * sizeof *arr);
            if (!grown) { rc = -1; break; }
            arr = grown;
            cap_cases *= 2;
        }
        if (parse_line(line, &arr[n]) != 0) {
            snprintf(err, cap, "%s:%d: malformed case line", path, lineno);
            rc = -1;
        }
        n++;
    }
    fclose(f);
    if (rc != 0 || n == 0) {
        if (n == 0 && rc == 0) snprintf(err, cap, "%s: no cases", path);
        free(arr);
        return -1;
    }
    *cases = arr;
    *count = n;
    return 0;
}

static int load_array(const char *dir, const char *name, const char *what, struct todre_npy *a,
                      char *err, size_t cap)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s_%s.npy", dir, name, what);
    return todre_npy_load(path, a, err, cap);
}

static int check_shapes(const struct tt_case *c, char *err, size_t cap)
{
    int64_t cls_count = c->cls_kind == TT_CLS_NONE ? 0 : (int64_t)c->cls.count;
    if (c->emb.rank != 2 || c->emb.shape[0] != c->n || c->emb.shape[1] != c->d ||
        c->order.rank != 1 || c->order.shape[0] != c->k || strcmp(c->order.descr, "<i8") ||
        c->margin.rank != 1 || c->margin.shape[0] != c->k || strcmp(c->margin.descr, "<f8") ||
        (c->cls_kind != TT_CLS_NONE && cls_count != c->n)) {
        snprintf(err, cap, "%s: fixture arrays do not match the manifest", c->name);
        return -1;
    }
    return 0;
}

int tt_case_load(const char *dir, struct tt_case *c, char *err, size_t cap)
{
    if (load_array(dir, c->name, "emb", &c->emb, err, cap) ||
        load_array(dir, c->name, "order", &c->order, err, cap) ||
        load_array(dir, c->name, "margin", &c->margin, err, cap) ||
        (c->cls_kind != TT_CLS_NONE && load_array(dir, c->name, "cls", &c->cls, err, cap)) ||
        check_shapes(c, err, cap)) {
        tt_case_free(c);
        return -1;
    }
    return 0;
}

void tt_case_free(struct tt_case *c)
{
    todre_npy_free(&c->emb);
    todre_npy_free(&c->cls);
    todre_npy_free(&c->order);
    todre_npy_free(&c->margin);
}
