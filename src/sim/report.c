/* Reports of a simulation: text table, CSV and an SVG chart. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/gv_sim.h"

void gv_sim_buf_printf(struct gv_sim_buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? b->cap - b->len : 0, fmt,
                          ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->data != NULL && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t ncap = b->cap ? b->cap * 2 : 4096;
        while (ncap - b->len <= (size_t)n)
            ncap *= 2;
        char *d = realloc(b->data, ncap);
        if (d == NULL) {
            b->oom = true;
            return;
        }
        b->data = d;
        b->cap = ncap;
    }
}

void gv_sim_buf_free(struct gv_sim_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

static const struct gv_sim_curve *curve(const struct gv_sim_report *r, uint32_t p, uint32_t s)
{
    return &r->curves[p * r->n_seeds + s];
}

/* Mean and sample standard deviation of allocated % at arrived pct. */
static void stats_at(const struct gv_sim_report *r, uint32_t p, uint32_t pct, double *mean,
                     double *sd)
{
    double sum = 0, sq = 0;
    for (uint32_t s = 0; s < r->n_seeds; s++)
        sum += curve(r, p, s)->allocated[pct];
    *mean = sum / r->n_seeds;
    for (uint32_t s = 0; s < r->n_seeds; s++) {
        double d = curve(r, p, s)->allocated[pct] - *mean;
        sq += d * d;
    }
    *sd = r->n_seeds > 1 ? sqrt(sq / (r->n_seeds - 1)) : 0.0;
}

void gv_sim_headline(const struct gv_sim_report *r, uint32_t p, double *mean, double *sd)
{
    uint32_t at = r->max_pct < 100 ? r->max_pct : 100;
    stats_at(r, p, at, mean, sd);
    *mean = 100.0 - *mean;
}

static uint32_t headline_policy(const struct gv_sim_report *r)
{
    for (uint32_t p = 0; p < r->n_policies; p++)
        if (r->policies[p] == GV_ALLOC_POLICY_FGD)
            return p;
    return 0;
}

void gv_sim_report_table(const struct gv_sim_report *r, const char *title, struct gv_sim_buf *b)
{
    uint32_t first = r->max_pct >= 80 ? 80 : 0;
    gv_sim_buf_printf(b, "%s\n", title);
    gv_sim_buf_printf(b, "allocated GPU %% of capacity when arrived GPU requests reach X %% "
                         "(mean +- sd over %u seed%s)\n\n",
                      r->n_seeds, r->n_seeds == 1 ? "" : "s");
    gv_sim_buf_printf(b, "%-8s", "policy");
    for (uint32_t pct = first; pct <= r->max_pct; pct += 10)
        gv_sim_buf_printf(b, " %13u%%", pct);
    gv_sim_buf_printf(b, " %15s %8s %9s\n", "unalloc@100%", "failed", "s/seed");
    for (uint32_t p = 0; p < r->n_policies; p++) {
        gv_sim_buf_printf(b, "%-8s", gv_alloc_policy_name(r->policies[p]));
        for (uint32_t pct = first; pct <= r->max_pct; pct += 10) {
            double m, sd;
            stats_at(r, p, pct, &m, &sd);
            gv_sim_buf_printf(b, " %6.2f +- %4.2f", m, sd);
        }
        double m, sd, secs = 0, failed = 0;
        gv_sim_headline(r, p, &m, &sd);
        for (uint32_t s = 0; s < r->n_seeds; s++) {
            secs += curve(r, p, s)->seconds;
            failed += (double)curve(r, p, s)->failed;
        }
        gv_sim_buf_printf(b, " %7.2f +- %4.2f %8.0f %9.3f\n", m, sd, failed / r->n_seeds,
                          secs / r->n_seeds);
    }
    uint32_t hp = headline_policy(r);
    double m, sd;
    gv_sim_headline(r, hp, &m, &sd);
    gv_sim_buf_printf(b, "\nunallocated_pct_at_100 policy=%s mean=%.2f sd=%.2f seeds=%u\n",
                      gv_alloc_policy_name(r->policies[hp]), m, sd, r->n_seeds);
}

void gv_sim_report_csv(const struct gv_sim_report *r, struct gv_sim_buf *b)
{
    gv_sim_buf_printf(b, "policy,seed,arrived_pct,allocated_pct\n");
    for (uint32_t p = 0; p < r->n_policies; p++)
        for (uint32_t s = 0; s < r->n_seeds; s++)
            for (uint32_t pct = 0; pct <= r->max_pct; pct++)
                gv_sim_buf_printf(b, "%s,%llu,%u,%.4f\n", gv_alloc_policy_name(r->policies[p]),
                                  (unsigned long long)r->seeds[s], pct,
                                  curve(r, p, s)->allocated[pct]);
}

static void xml_text(struct gv_sim_buf *b, const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '<': gv_sim_buf_printf(b, "&lt;"); break;
        case '>': gv_sim_buf_printf(b, "&gt;"); break;
        case '&': gv_sim_buf_printf(b, "&amp;"); break;
        case '"': gv_sim_buf_printf(b, "&quot;"); break;
        default: gv_sim_buf_printf(b, "%c", *s); break;
        }
    }
}

void gv_sim_report_svg(const struct gv_sim_report *r, const char *title, struct gv_sim_buf *b)
{
    static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                         "#9467bd", "#8c564b"};
    const double W = 800, H = 520, L = 70, R = 170, T = 50, B = 60;
    const double pw = W - L - R, ph = H - T - B;
    double xmax = r->max_pct > 0 ? r->max_pct : 1;
#define X(v) (L + (v) / xmax * pw)
#define Y(v) (T + ph - (v) / 100.0 * ph)
    gv_sim_buf_printf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                         "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
                      W, H, W, H);
    gv_sim_buf_printf(b, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    gv_sim_buf_printf(b, "<text x=\"%.0f\" y=\"28\" font-size=\"15\" text-anchor=\"middle\">",
                      L + pw / 2);
    xml_text(b, title);
    gv_sim_buf_printf(b, "</text>\n");
    for (uint32_t v = 0; v <= 100; v += 10) {
        gv_sim_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                             "stroke=\"#e0e0e0\"/>\n<text x=\"%.1f\" y=\"%.1f\" "
                             "text-anchor=\"end\">%u</text>\n",
                          L, Y(v), L + pw, Y(v), L - 6, Y(v) + 4, v);
    }
    for (uint32_t v = 0; v <= r->max_pct; v += 10) {
        gv_sim_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                             "stroke=\"#e0e0e0\"/>\n<text x=\"%.1f\" y=\"%.1f\" "
                             "text-anchor=\"middle\">%u</text>\n",
                          X(v), T, X(v), T + ph, X(v), T + ph + 16, v);
    }
    gv_sim_buf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                         "fill=\"none\" stroke=\"#333\"/>\n",
                      L, T, pw, ph);
    gv_sim_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">arrived GPU "
                         "requests (%% of cluster GPU capacity)</text>\n",
                      L + pw / 2, H - 18);
    gv_sim_buf_printf(b, "<text transform=\"translate(20 %.1f) rotate(-90)\" "
                         "text-anchor=\"middle\">allocated GPU (%% of capacity)</text>\n",
                      T + ph / 2);
    /* ideal: everything that arrives is allocated, up to capacity */
    double knee = xmax < 100 ? xmax : 100;
    gv_sim_buf_printf(b, "<polyline fill=\"none\" stroke=\"#999\" stroke-dasharray=\"5,4\" "
                         "points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\"/>\n",
                      X(0), Y(0), X(knee), Y(knee), X(xmax), Y(knee));
    for (uint32_t p = 0; p < r->n_policies; p++) {
        const char *col = colors[p % (sizeof(colors) / sizeof(colors[0]))];
        gv_sim_buf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
                          col);
        for (uint32_t pct = 0; pct <= r->max_pct; pct++) {
            double m, sd;
            stats_at(r, p, pct, &m, &sd);
            gv_sim_buf_printf(b, "%.1f,%.1f ", X(pct), Y(m));
        }
        gv_sim_buf_printf(b, "\"/>\n");
        double m, sd;
        gv_sim_headline(r, p, &m, &sd);
        double ly = T + 20 + 22.0 * p;
        gv_sim_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                             "stroke=\"%s\" stroke-width=\"3\"/>\n<text x=\"%.1f\" y=\"%.1f\">"
                             "%s (%.2f%% unalloc.)</text>\n",
                          L + pw + 12, ly, L + pw + 34, ly, col, L + pw + 40, ly + 4,
                          gv_alloc_policy_name(r->policies[p]), m);
    }
    gv_sim_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#666\">ideal</text>\n",
                      L + pw + 40, T + 24 + 22.0 * r->n_policies);
    gv_sim_buf_printf(b, "</svg>\n");
#undef X
#undef Y
}
