/*
 * tests/consumer/prom.h - a parser of the Prometheus text exposition
 * format 0.0.4, strict enough to reject what a scraper would: names and
 * label names by the grammar, quoted label values with their escapes,
 * numeric values, HELP and TYPE at most once per family and before its
 * samples, every family's lines in one group, no duplicate series,
 * counters named *_total and never negative, and histograms whose
 * buckets are cumulative, in increasing `le`, end with +Inf equal to
 * _count, and come with _sum.
 */
#ifndef XFER_TEST_PROM_H
#define XFER_TEST_PROM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct prom_sample {
    char name[128];
    char labels[256]; /* canonical: k="v",... in the order given */
    double value;
} prom_sample;

typedef struct prom {
    prom_sample *s;
    size_t n, cap;
    char err[256]; /* why the text was refused */
} prom;

/* 0 when the text is valid (p filled), -1 with p->err otherwise. */
int prom_parse(const char *text, prom *p);
void prom_free(prom *p);
/* The value of the series name{labels} ("" for none); *found says. */
double prom_get(const prom *p, const char *name, const char *labels,
                bool *found);
/* The sum over every series of `name` whose labels contain `part`. */
double prom_sum(const prom *p, const char *name, const char *part);

#endif /* XFER_TEST_PROM_H */
