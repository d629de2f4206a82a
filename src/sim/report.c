/* Reports of a simulation: text table, CSV and an SVG chart. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
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

/* Does any replay have a nonzero counter at offset off of its curve? */
static bool any_curve(const struct gv_sim_report *r, size_t off)
{
    for (uint32_t i = 0; i < r->n_policies * r->n_seeds; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&r->curves[i] + off, sizeof(v));
        if (v != 0)
            return true;
    }
    return false;
}

/* Pods asking whole devices (MIG, passthrough, mdev), placed by count: per policy, mean over seeds. */
static void report_whole(const struct gv_sim_report *r, struct gv_sim_buf *b)
{
    if (!any_curve(r, offsetof(struct gv_sim_curve, whole_arrivals)))
        return;
    gv_sim_buf_printf(b, "\nwhole devices (MIG, passthrough, mdev; placed by count, mean over "
                         "seeds)\n%-8s %9s %9s %9s\n", "policy", "arrivals", "placed", "failed");
    for (uint32_t p = 0; p < r->n_policies; p++) {
        double arr = 0, placed = 0, failed = 0;
        for (uint32_t s = 0; s < r->n_seeds; s++) {
            arr += (double)curve(r, p, s)->whole_arrivals / r->n_seeds;
            placed += (double)curve(r, p, s)->whole_placed / r->n_seeds;
            failed += (double)curve(r, p, s)->whole_failed / r->n_seeds;
        }
        gv_sim_buf_printf(b, "%-8s %9.1f %9.1f %9.1f\n", gv_alloc_policy_name(r->policies[p]),
                          arr, placed, failed);
    }
}

/* With priorities: what preemption cost each policy (mean over seeds). */
static void report_priority(const struct gv_sim_report *r, struct gv_sim_buf *b)
{
    if (!any_curve(r, offsetof(struct gv_sim_curve, high_arrivals)))
        return;
    gv_sim_buf_printf(b, "\npriorities (high-priority pods; preemption as the scheduler's "
                         "preempt verb; mean over seeds)\n%-8s %9s %9s %9s %9s %9s %11s\n",
                      "policy", "high", "at once", "preempt", "unplaced", "evicted",
                      "evicted GPU");
    for (uint32_t p = 0; p < r->n_policies; p++) {
        double v[6] = {0};
        for (uint32_t s = 0; s < r->n_seeds; s++) {
            const struct gv_sim_curve *c = curve(r, p, s);
            v[0] += (double)c->high_arrivals / r->n_seeds;
            v[1] += (double)c->high_placed / r->n_seeds;
            v[2] += (double)c->high_preempted / r->n_seeds;
            v[3] += (double)c->high_failed / r->n_seeds;
            v[4] += (double)c->evicted / r->n_seeds;
            v[5] += (double)c->evicted_milli / 1000.0 / r->n_seeds;
        }
        gv_sim_buf_printf(b, "%-8s %9.1f %9.1f %9.1f %9.1f %9.1f %11.2f\n",
                          gv_alloc_policy_name(r->policies[p]), v[0], v[1], v[2], v[3], v[4],
                          v[5]);
    }
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
    report_whole(r, b);
    report_priority(r, b);
    if (r->refs != NULL) {
        double om = 0, bm = 0, cm = 0, osq = 0, bsq = 0, csq = 0;
        for (uint32_t s = 0; s < r->n_seeds; s++) {
            om += r->refs[s].oracle_unalloc_pct / r->n_seeds;
            bm += r->refs[s].bound_unalloc_pct / r->n_seeds;
            cm += r->refs[s].capacity_bound_unalloc_pct / r->n_seeds;
        }
        for (uint32_t s = 0; s < r->n_seeds; s++) {
            osq += pow(r->refs[s].oracle_unalloc_pct - om, 2);
            bsq += pow(r->refs[s].bound_unalloc_pct - bm, 2);
            csq += pow(r->refs[s].capacity_bound_unalloc_pct - cm, 2);
        }
        double div = r->n_seeds > 1 ? r->n_seeds - 1 : 1;
        gv_sim_buf_printf(b, "\noffline reference (not a scheduler: sees every pod arrived by 100 %% "
                             "at once)\n");
        if (isnan(om)) /* --reference bounds */
            gv_sim_buf_printf(b, "%-8s %s\n", "oracle",
                              "not computed (--reference bounds; full computes it)");
        else
            gv_sim_buf_printf(b, "%-8s %-60s %7.2f +- %4.2f\n", "oracle",
                              "best of fgd knowing all pods, largest-first binpack/fgd", om,
                              sqrt(osq / div));
        double lps = 0;
        for (uint32_t s = 0; s < r->n_seeds; s++)
            lps += r->refs[s].lp_seconds / r->n_seeds;
        gv_sim_buf_printf(b, "%-8s %-60s %7.2f +- %4.2f %18.3f\n", "bound",
                          "lower bound: LP relaxation with packing cuts (any placement)",
                          bm, sqrt(bsq / div), lps);
        gv_sim_buf_printf(b, "%-8s %-60s %7.2f +- %4.2f\n", "capacity",
                          "weaker bound: capacity per GPU model set, CPU, memory",
                          cm, sqrt(csq / div));
    }
    if (r->topology) {
        gv_sim_buf_printf(b, "\nmulti-GPU containers on nodes with a known interconnect "
                             "(mean per seed; %% of them)\n");
        gv_sim_buf_printf(b, "%-8s %12s %18s %16s %9s %14s\n", "policy", "containers",
                          "one NVLink island", "one PCIe switch", "spanning", "tightest set");
        for (uint32_t p = 0; p < r->n_policies; p++) {
            double n = 0, nv = 0, pc = 0, sp = 0, ti = 0;
            for (uint32_t s = 0; s < r->n_seeds; s++) {
                const struct gv_sim_curve *c = curve(r, p, s);
                n += (double)c->multi_gpu;
                nv += (double)c->multi_nvlink;
                pc += (double)c->multi_pcie;
                sp += (double)c->multi_spanning;
                ti += (double)c->multi_tight;
            }
            double d = n > 0 ? n : 1;
            gv_sim_buf_printf(b, "%-8s %12.1f %17.1f%% %15.1f%% %8.1f%% %13.1f%%\n",
                              gv_alloc_policy_name(r->policies[p]), n / r->n_seeds,
                              100.0 * nv / d, 100.0 * pc / d, 100.0 * sp / d, 100.0 * ti / d);
        }
    }
    uint32_t hp = headline_policy(r);
    double m, sd;
    gv_sim_headline(r, hp, &m, &sd);
    if (r->topology) {
        double n = 0, ti = 0;
        for (uint32_t s = 0; s < r->n_seeds; s++) {
            n += (double)curve(r, hp, s)->multi_gpu;
            ti += (double)curve(r, hp, s)->multi_tight;
        }
        gv_sim_buf_printf(b, "\nmulti_gpu_tightest_set_pct policy=%s pct=%.1f containers=%.1f\n",
                          gv_alloc_policy_name(r->policies[hp]), n > 0 ? 100.0 * ti / n : 0.0,
                          n / r->n_seeds);
    }
    gv_sim_buf_printf(b, "%sunallocated_pct_at_100 policy=%s mean=%.2f sd=%.2f seeds=%u\n",
                      r->topology ? "" : "\n", gv_alloc_policy_name(r->policies[hp]), m, sd,
                      r->n_seeds);
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

/* One chart panel: axes, grid, the ideal line and each policy's mean curve
 * over arrived x0..x1 % and allocated y0..100 %. */
struct panel {
    double left, top, w, h;
    uint32_t x0, x1;
    double y0;
};

static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b"};

static double px(const struct panel *p, double x)
{
    return p->left + (x - p->x0) / (double)(p->x1 - p->x0 ? p->x1 - p->x0 : 1) * p->w;
}

static double py(const struct panel *p, double y)
{
    return p->top + p->h - (y - p->y0) / (100.0 - p->y0) * p->h;
}

static void svg_panel(const struct gv_sim_report *r, const struct panel *p, const char *label,
                      struct gv_sim_buf *b)
{
    double ystep = 100.0 - p->y0 > 50 ? 10 : (100.0 - p->y0 > 20 ? 5 : 1);
    for (double v = p->y0; v <= 100.0 + 1e-9; v += ystep)
        gv_sim_buf_printf(b,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n",
                          p->left, py(p, v), p->left + p->w, py(p, v), p->left - 6, py(p, v) + 4, v);
    uint32_t xstep = p->x1 - p->x0 > 60 ? 10 : 5;
    for (uint32_t v = p->x0; v <= p->x1; v += xstep)
        gv_sim_buf_printf(b,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%u</text>\n",
                          px(p, v), p->top, px(p, v), p->top + p->h, px(p, v),
                          p->top + p->h + 16, v);
    gv_sim_buf_printf(b,
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                      "stroke=\"#333\"/>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s"
                      "</text>\n",
                      p->left, p->top, p->w, p->h, p->left + p->w / 2, p->top - 8, label);
    /* ideal: everything that arrives is allocated, up to capacity */
    gv_sim_buf_printf(b, "<polyline fill=\"none\" stroke=\"#999\" stroke-dasharray=\"5,4\" points=\"");
    for (uint32_t x = p->x0; x <= p->x1; x++) {
        double y = x < 100 ? x : 100;
        if (y >= p->y0)
            gv_sim_buf_printf(b, "%.1f,%.1f ", px(p, x), py(p, y));
    }
    gv_sim_buf_printf(b, "\"/>\n");
    for (uint32_t k = 0; k < r->n_policies; k++) {
        gv_sim_buf_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"",
                          colors[k % (sizeof(colors) / sizeof(colors[0]))]);
        for (uint32_t x = p->x0; x <= p->x1; x++) {
            double m, sd;
            stats_at(r, k, x, &m, &sd);
            if (m >= p->y0)
                gv_sim_buf_printf(b, "%.1f,%.1f ", px(p, x), py(p, m));
        }
        gv_sim_buf_printf(b, "\"/>\n");
    }
}

void gv_sim_report_svg(const struct gv_sim_report *r, const char *title, struct gv_sim_buf *b)
{
    const double W = 1000, H = 560;
    uint32_t zoom_from = r->max_pct >= 100 ? 80 : 0;
    /* zoom panel: from the lowest curve at 80 % arrived, in steps of 5 */
    double lo = 100;
    for (uint32_t k = 0; k < r->n_policies; k++)
        for (uint32_t x = zoom_from; x <= r->max_pct; x++) {
            double m, sd;
            stats_at(r, k, x, &m, &sd);
            lo = fmin(lo, m);
        }
    lo = fmax(0, floor((lo - 1) / 5) * 5);
    struct panel full = {60, 60, 400, 380, 0, r->max_pct, 0};
    struct panel zoom = {560, 60, 400, 380, zoom_from, r->max_pct, lo};
    gv_sim_buf_printf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                         "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
                         "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
                         "<text x=\"%.0f\" y=\"24\" font-size=\"14\" text-anchor=\"middle\">",
                      W, H, W, H, W / 2);
    xml_text(b, title);
    gv_sim_buf_printf(b, "</text>\n");
    svg_panel(r, &full, "all arrivals", b);
    svg_panel(r, &zoom, "zoom", b);
    gv_sim_buf_printf(b,
                      "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">arrived GPU requests (%% "
                      "of cluster GPU capacity)</text>\n<text transform=\"translate(18 %.0f) "
                      "rotate(-90)\" text-anchor=\"middle\">allocated GPU (%% of capacity)</text>\n",
                      W / 2, full.top + full.h + 40, full.top + full.h / 2);
    double lx = 60, ly = H - 50;
    for (uint32_t k = 0; k < r->n_policies; k++) {
        double m, sd;
        gv_sim_headline(r, k, &m, &sd);
        gv_sim_buf_printf(b,
                          "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
                          "stroke-width=\"3\"/><text x=\"%.0f\" y=\"%.0f\">%s: %.2f%% "
                          "unallocated</text>\n",
                          lx, ly, lx + 22, ly, colors[k % (sizeof(colors) / sizeof(colors[0]))],
                          lx + 28, ly + 4, gv_alloc_policy_name(r->policies[k]), m);
        lx += 225;
    }
    gv_sim_buf_printf(b,
                      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#999\" "
                      "stroke-dasharray=\"5,4\"/><text x=\"%.0f\" y=\"%.0f\" fill=\"#666\">ideal"
                      "</text>\n</svg>\n",
                      60.0, H - 24, 82.0, H - 24, 88.0, H - 20);
}
