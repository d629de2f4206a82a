/*
 * Churn replay (gv_sim_churn, docs/simulate.md "Pods departing and
 * defragmentation"): what periodic defragmentation buys once pods come and
 * go.  The openb protocol never frees anything, so fragmentation there only
 * comes from arrival order; with departures it builds up the way it does in
 * a live cluster, and the defrag planner (src/alloc/gv_defrag.h) can undo
 * some of it.  The same seed gives the same arrivals and lifetimes with and
 * without defragmentation, so the two runs differ only by the moves.
 *
 * With priorities (gv_sim_set_high_priority or the CSV column) a
 * high-priority pod that does not fit preempts lower ones as the
 * scheduler's preempt verb does (sim_preempt), and when no eviction makes
 * room it waits: retried, oldest first, a few a step as departures free
 * GPUs, until placed or it gives up after 2L arrivals.  How long it waited
 * (in arrivals, the replay's clock) is what a policy costs high-priority
 * work.  Low-priority pods keep the one attempt; victims are not re-queued.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/gv_defrag.h"
#include "sim/sim_internal.h"

struct live {
    struct gv_alloc_request req; /* the template, shallow copy, with this arrival's uid */
    struct gv_alloc_assignment at;
    uint64_t depart;            /* arrival index at which it leaves; waiting: its lifetime */
    uint64_t arrived;           /* arrival index (waiting high-priority pods) */
    uint32_t next;              /* next live pod leaving in the same slot, UINT32_MAX: none */
    int32_t prio;
    bool waiting;               /* a high-priority pod not placed yet (holds nothing) */
};

struct churn {
    struct gv_alloc_cluster *c;
    struct live *pods;          /* slots, reused */
    uint32_t n, cap, *free_slots, n_free;
    uint32_t *dep;              /* per arrival index mod ring: first leaving slot */
    uint64_t ring;
    /* with priorities */
    char **names;               /* the engine's node names, for preemption samples */
    uint32_t *queue;            /* waiting high-priority pods' slots, a ring, oldest first */
    size_t q_head, q_len, q_cap;
    uint32_t *waits;            /* arrivals waited by each placed high pod after the warm-up */
    size_t n_waits, cap_waits;
    uint64_t warm, patience;
    size_t n_nodes;
    struct gv_sim_churn_result *out;
    uint64_t k;                 /* the step being replayed (for the victims' count) */
};

/* Retries of waiting pods per arrival: a scheduler retries its queue as
 * GPUs free up, not all of it on every event (and the replay stays fast). */
#define RETRIES_PER_STEP 4

static double cpu_now(void)
{
    return (double)clock() / CLOCKS_PER_SEC;
}

static gv_status slot_new(struct churn *ch, uint32_t *out, struct gv_error *err)
{
    if (ch->n_free > 0) {
        *out = ch->free_slots[--ch->n_free];
        return GV_OK;
    }
    if (ch->n == ch->cap) {
        uint32_t ncap = ch->cap ? ch->cap * 2 : 256;
        struct live *np = realloc(ch->pods, (size_t)ncap * sizeof(*np));
        uint32_t *nf = realloc(ch->free_slots, (size_t)ncap * sizeof(*nf));
        if (np != NULL)
            ch->pods = np;
        if (nf != NULL)
            ch->free_slots = nf;
        if (np == NULL || nf == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        ch->cap = ncap;
    }
    *out = ch->n++;
    return GV_OK;
}

/* One defrag pass over every live pod; moves applied as the plan says. */
static gv_status defrag_pass(struct churn *ch, const struct gv_sim_churn_opts *o,
                             struct gv_sim_churn_result *out, bool measure, struct gv_error *err)
{
    size_t n_live = 0;
    struct gv_defrag_pod *pods = malloc(((size_t)ch->n + 1) * sizeof(*pods));
    uint32_t *slot_of = malloc(((size_t)ch->n + 1) * sizeof(*slot_of));
    if (pods == NULL || slot_of == NULL) {
        free(pods);
        free(slot_of);
        return gv_error_set(err, GV_ENOMEM, "out of memory");
    }
    for (uint32_t s = 0; s < ch->n; s++) {
        if (ch->pods[s].req.uid[0] == '\0' || ch->pods[s].waiting)
            continue;
        slot_of[n_live] = s;
        pods[n_live++] = (struct gv_defrag_pod){&ch->pods[s].req, &ch->pods[s].at, true, -1};
    }
    struct gv_defrag_input in = {pods, n_live, NULL, 0, NULL, 0, o->max_moves, 256};
    struct gv_defrag_plan plan;
    double t0 = cpu_now();
    gv_status rc = gv_defrag_plan(ch->c, &in, &plan, err);
    out->plan_seconds += cpu_now() - t0;
    for (size_t m = 0; rc == GV_OK && m < plan.n_moves; m++) {
        struct live *l = &ch->pods[slot_of[plan.moves[m].pod]];
        if ((rc = gv_alloc_release(ch->c, l->req.uid, err)) == GV_OK &&
            (rc = gv_alloc_place(ch->c, &l->req, &plan.moves[m].to, err)) == GV_OK) {
            l->at = plan.moves[m].to;
            if (ch->names != NULL) /* moved: a possible victim again where it landed */
                gv_alloc_pod_set_victim(ch->c, l->req.uid, l->at.node, l->prio, NULL);
        }
    }
    if (rc == GV_OK && measure) {
        out->passes++;
        out->moves += plan.n_moves;
        out->frag_recovered_pct += 100 * (plan.before.frag.ratio - plan.after.frag.ratio);
        out->idle_recovered += plan.after.idle_gpus - plan.before.idle_gpus;
    }
    gv_defrag_plan_free(&plan);
    free(pods);
    free(slot_of);
    return rc;
}

/* ---- priorities ---------------------------------------------------------- */

/* A victim of a preemption: gone from the engine already; its slot holds
 * nothing until its departure comes round (the slot stays linked there). */
static void churn_evicted(void *ud, const char *uid)
{
    struct churn *ch = ud;
    const char *dash = strrchr(uid, '-'); /* "c-<k>-<slot>" */
    uint32_t s = dash != NULL ? (uint32_t)strtoul(dash + 1, NULL, 10) : UINT32_MAX;
    if (s < ch->n && strcmp(ch->pods[s].req.uid, uid) == 0) {
        ch->pods[s].req.uid[0] = '\0';
        ch->out->low_evicted += ch->k >= ch->warm;
    }
}

/* Places slot s's pod at step k: as it is, else by preemption (high
 * priority only).  Links its departure; records a high pod's wait. */
static gv_status churn_place(struct churn *ch, uint32_t s, uint64_t k, bool *placed,
                             struct gv_sim_churn_result *out, struct gv_error *err)
{
    struct live *l = &ch->pods[s];
    bool at_once = gv_alloc_pick(ch->c, &l->req, NULL, 0, &l->at, NULL) == GV_OK &&
                   gv_alloc_place(ch->c, &l->req, &l->at, NULL) == GV_OK;
    ch->k = k;
    bool by_preemption = !at_once && l->prio > 0 &&
                         sim_preempt(ch->c, &l->req, l->prio, ch->names, ch->n_nodes, k, &l->at,
                                     churn_evicted, ch);
    *placed = at_once || by_preemption;
    if (!*placed)
        return GV_OK;
    gv_alloc_pod_set_victim(ch->c, l->req.uid, l->at.node, l->prio, NULL);
    l->waiting = false;
    l->depart = k + l->depart; /* lifetime from now */
    l->next = ch->dep[l->depart % ch->ring];
    ch->dep[l->depart % ch->ring] = s;
    if (l->prio <= 0 || l->arrived < ch->warm)
        return GV_OK;
    if (k == l->arrived) {
        if (at_once)
            out->high_at_once++;
        else
            out->high_preempted++;
    } else {
        out->high_waited++;
    }
    if (ch->n_waits == ch->cap_waits) {
        size_t ncap = ch->cap_waits ? ch->cap_waits * 2 : 1024;
        uint32_t *nw = realloc(ch->waits, ncap * sizeof(*nw));
        if (nw == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        ch->waits = nw;
        ch->cap_waits = ncap;
    }
    uint64_t w = k - l->arrived;
    ch->waits[ch->n_waits++] = w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
    return GV_OK;
}

static gv_status queue_push(struct churn *ch, uint32_t s, struct gv_error *err)
{
    if (ch->q_len == ch->q_cap) {
        size_t ncap = ch->q_cap ? ch->q_cap * 2 : 256;
        uint32_t *nq = malloc(ncap * sizeof(*nq));
        if (nq == NULL)
            return gv_error_set(err, GV_ENOMEM, "out of memory");
        for (size_t i = 0; i < ch->q_len; i++)
            nq[i] = ch->queue[(ch->q_head + i) % ch->q_cap];
        free(ch->queue);
        ch->queue = nq;
        ch->q_head = 0;
        ch->q_cap = ncap;
    }
    ch->queue[(ch->q_head + ch->q_len++) % ch->q_cap] = s;
    return GV_OK;
}

static void slot_free(struct churn *ch, uint32_t s)
{
    ch->pods[s].req.uid[0] = '\0';
    ch->pods[s].waiting = false;
    ch->free_slots[ch->n_free++] = s;
}

/* Up to RETRIES_PER_STEP waiting pods, oldest first: placed, given up
 * (waited past the patience), or back to the end of the queue. */
static gv_status queue_retry(struct churn *ch, uint64_t k, struct gv_sim_churn_result *out,
                             struct gv_error *err)
{
    size_t n = ch->q_len < RETRIES_PER_STEP ? ch->q_len : RETRIES_PER_STEP;
    for (size_t i = 0; i < n; i++) {
        uint32_t s = ch->queue[ch->q_head];
        ch->q_head = (ch->q_head + 1) % ch->q_cap;
        ch->q_len--;
        bool placed = false;
        gv_status rc = churn_place(ch, s, k, &placed, out, err);
        if (rc != GV_OK)
            return rc;
        if (placed)
            continue;
        if (k - ch->pods[s].arrived > ch->patience) {
            out->high_unplaced += ch->pods[s].arrived >= ch->warm;
            slot_free(ch, s);
            continue;
        }
        if ((rc = queue_push(ch, s, err)) != GV_OK)
            return rc;
    }
    return GV_OK;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Mean, 95th and 99th percentiles (nearest rank) of the waits. */
static void wait_figures(struct churn *ch, struct gv_sim_churn_result *out)
{
    if (ch->n_waits == 0)
        return;
    qsort(ch->waits, ch->n_waits, sizeof(*ch->waits), cmp_u32);
    double sum = 0;
    for (size_t i = 0; i < ch->n_waits; i++)
        sum += ch->waits[i];
    out->wait_mean = sum / (double)ch->n_waits;
    size_t r95 = (size_t)ceil((double)ch->n_waits * 0.95);
    size_t r99 = (size_t)ceil((double)ch->n_waits * 0.99);
    out->wait_p95 = ch->waits[(r95 ? r95 : 1) - 1];
    out->wait_p99 = ch->waits[(r99 ? r99 : 1) - 1];
}

/* With priorities every placed pod is a possible victim where it is, moved
 * or not: a pod the planner moved and left unmarked could never be
 * preempted again, and the replay would understate what preemption finds
 * (nothing else shows it).  Checked once at the end: the engine's victims,
 * node by node, are exactly the live placed pods. */
static gv_status check_victims(const struct churn *ch, const struct gv_sim_trace *t,
                               struct gv_error *err)
{
    size_t live = 0, marked = 0;
    for (uint32_t s = 0; s < ch->n; s++)
        live += ch->pods[s].req.uid[0] != '\0' && !ch->pods[s].waiting;
    for (size_t i = 0; i < t->n_nodes; i++)
        marked += gv_alloc_node_victims(ch->c, t->nodes[i].spec.name, NULL, 0);
    if (marked != live)
        return gv_error_set(err, GV_EINTERNAL,
                            "churn replay: %zu pods placed but %zu marked as possible victims",
                            live, marked);
    return GV_OK;
}

gv_status gv_sim_churn(const struct gv_sim_trace *t, gv_alloc_policy policy, uint64_t seed,
                       const struct gv_sim_churn_opts *o, struct gv_sim_churn_result *out,
                       struct gv_error *err)
{
    memset(out, 0, sizeof(*out));
    uint64_t cap = gv_sim_trace_gpu_milli(t), req = gv_sim_trace_request_milli(t);
    if (cap == 0 || req == 0 || t->n_pods == 0)
        return gv_error_set(err, GV_EINVAL, "churn replay: the cluster or the workload has no GPUs");
    if (!(o->load > 0 && o->load <= 3) || o->lifetimes < 1 || o->lifetimes > 1000)
        return gv_error_set(err, GV_EINVAL, "churn replay: load %.3g or lifetimes %llu out of range",
                            o->load, (unsigned long long)o->lifetimes);
    double t0 = cpu_now();
    /* Little's law: live demand = arrival rate x mean lifetime; one arrival
     * per step, mean GPU request req / n_pods, so L = load x cap / mean. */
    double mean = (double)req / (double)t->n_pods;
    uint64_t L = (uint64_t)(o->load * (double)cap / mean);
    if (L < 1)
        L = 1;
    uint64_t warm = 2 * L, total = warm + o->lifetimes * L;
    uint64_t sample_every = L / 50 > 0 ? L / 50 : 1;
    struct gv_alloc_config cfg;
    sim_engine_config(t, &cfg);
    cfg.node_policy = policy;
    cfg.gpu_policy = policy == GV_ALLOC_POLICY_SPREAD ? GV_ALLOC_GPU_SPREAD : GV_ALLOC_GPU_BINPACK;
    struct churn ch = {.ring = 2 * L + 1, .warm = warm, .patience = 2 * L, .out = out,
                       .n_nodes = t->n_nodes};
    bool prio = t->prio != NULL;
    struct sim_arrivals arr = {0};
    struct gv_sim_rng life;
    gv_sim_rng_seed(&life, seed ^ UINT64_C(0x6c69666574696d65)); /* its own stream */
    gv_status rc;
    ch.dep = malloc(ch.ring * sizeof(*ch.dep));
    if (ch.dep == NULL) {
        rc = gv_error_set(err, GV_ENOMEM, "out of memory");
        goto out;
    }
    memset(ch.dep, 0xff, ch.ring * sizeof(*ch.dep));
    if ((rc = gv_alloc_cluster_new(&cfg, &ch.c, err)) != GV_OK ||
        (rc = sim_engine_nodes(t, NULL, ch.c, err)) != GV_OK ||
        (rc = sim_arrivals_init(&arr, t, seed, err)) != GV_OK)
        goto out;
    if (prio) {
        if ((ch.names = malloc((t->n_nodes + 1) * sizeof(*ch.names))) == NULL) {
            rc = gv_error_set(err, GV_ENOMEM, "out of memory");
            goto out;
        }
        for (size_t i = 0; i < t->n_nodes; i++)
            ch.names[i] = (char *)(uintptr_t)t->nodes[i].spec.name;
    }
    uint64_t arrived_milli = 0, failed_milli = 0, samples = 0;
    double alloc_sum = 0, frag_sum = 0, idle_sum = 0;
    for (uint64_t k = 0; k < total; k++) {
        /* departures due now */
        uint32_t s = ch.dep[k % ch.ring];
        ch.dep[k % ch.ring] = UINT32_MAX;
        while (s != UINT32_MAX) {
            struct live *l = &ch.pods[s];
            uint32_t nx = l->next;
            if (l->depart == k) {
                gv_alloc_release(ch.c, l->req.uid, NULL);
                l->req.uid[0] = '\0';
                ch.free_slots[ch.n_free++] = s;
            }
            s = nx;
        }
        if (o->defrag_every > 0 && k > 0 && k % o->defrag_every == 0 &&
            (rc = defrag_pass(&ch, o, out, k >= warm, err)) != GV_OK)
            goto out;
        if (ch.q_len > 0 && (rc = queue_retry(&ch, k, out, err)) != GV_OK)
            goto out;
        size_t pi = sim_arrivals_next(&arr);
        const struct gv_alloc_request *tp = t->pods[pi];
        uint64_t milli = sim_pod_milli(tp);
        uint64_t lifetime = 1 + gv_sim_rng_below(&life, 2 * L);
        uint32_t slot = 0;
        if ((rc = slot_new(&ch, &slot, err)) != GV_OK)
            goto out;
        struct live *l = &ch.pods[slot];
        l->req = *tp;
        l->prio = prio && pi < t->n_prio ? t->prio[pi] : 0;
        l->arrived = k;
        l->waiting = false;
        if (prio) /* the slot in the uid: a victim's slot is found at once */
            snprintf(l->req.uid, sizeof(l->req.uid), "c-%llu-%u", (unsigned long long)k, slot);
        else
            snprintf(l->req.uid, sizeof(l->req.uid), "c-%llu", (unsigned long long)k);
        gv_alloc_observe(ch.c, &l->req);
        bool placed = false;
        if (milli > 0 && prio) {
            l->depart = lifetime;
            if ((rc = churn_place(&ch, slot, k, &placed, out, err)) != GV_OK)
                goto out;
        } else {
            placed = milli > 0 && gv_alloc_pick(ch.c, &l->req, NULL, 0, &l->at, NULL) == GV_OK &&
                     gv_alloc_place(ch.c, &l->req, &l->at, NULL) == GV_OK;
        }
        bool wait = !placed && milli > 0 && l->prio > 0;
        if (k >= warm) {
            out->arrivals++;
            arrived_milli += milli;
            out->high_arrivals += milli > 0 && l->prio > 0;
            if (!placed && milli > 0 && !wait) {
                out->failed++;
                failed_milli += milli;
            }
        }
        if (wait) { /* a high-priority pod no eviction made room for waits */
            l->waiting = true;
            if ((rc = queue_push(&ch, slot, err)) != GV_OK)
                goto out;
        } else if (!placed) { /* CPU-only pods and failures hold nothing */
            slot_free(&ch, slot);
        } else if (!prio) {
            l->depart = k + lifetime;
            l->next = ch.dep[l->depart % ch.ring];
            ch.dep[l->depart % ch.ring] = slot;
        }
        if (k >= warm && (k - warm) % sample_every == 0) {
            struct gv_alloc_totals tot;
            struct gv_defrag_state st;
            gv_alloc_cluster_totals(ch.c, &tot);
            if ((rc = gv_defrag_measure(ch.c, NULL, 0, &st, err)) != GV_OK)
                goto out;
            alloc_sum += tot.milli_capacity ? 100.0 * (double)tot.milli_used /
                                                  (double)tot.milli_capacity
                                            : 0;
            frag_sum += 100 * st.frag.ratio;
            idle_sum += st.idle_gpus;
            samples++;
        }
    }
    out->failed_pct = arrived_milli ? 100.0 * (double)failed_milli / (double)arrived_milli : 0;
    out->alloc_pct = samples ? alloc_sum / (double)samples : 0;
    out->frag_pct = samples ? frag_sum / (double)samples : 0;
    out->idle_gpus = samples ? idle_sum / (double)samples : 0;
    if (out->passes > 0)
        out->frag_recovered_pct /= (double)out->passes;
    /* still waiting at the end: not placed (yet) */
    for (size_t i = 0; i < ch.q_len; i++)
        out->high_unplaced += ch.pods[ch.queue[(ch.q_head + i) % ch.q_cap]].arrived >= warm;
    wait_figures(&ch, out);
    out->lifetime_mean = L;
    rc = prio ? check_victims(&ch, t, err) : GV_OK;
out:
    out->seconds = cpu_now() - t0;
    sim_arrivals_fini(&arr);
    gv_alloc_cluster_free(ch.c);
    free(ch.pods);
    free(ch.free_slots);
    free(ch.dep);
    free(ch.names);
    free(ch.queue);
    free(ch.waits);
    return rc;
}

gv_status gv_sim_churn_parse(const char *spec, struct gv_sim_churn_opts *o, struct gv_error *err)
{
    uint64_t load = (uint64_t)(o->load * 100 + 0.5), lifetimes = o->lifetimes,
             moves = o->max_moves;
    const struct sim_kv keys[] = {
        {"load", &load, 300, NULL},
        {"lifetimes", &lifetimes, 1000, NULL},
        {"moves", &moves, 100000, NULL},
    };
    gv_status rc = sim_parse_kv("--churn", spec, keys, sizeof(keys) / sizeof(keys[0]), err);
    if (rc != GV_OK)
        return rc;
    if (load == 0 || lifetimes == 0)
        return gv_error_set(err, GV_EINVAL, "--churn: load and lifetimes must be positive");
    o->load = (double)load / 100.0;
    o->lifetimes = lifetimes;
    o->max_moves = (uint32_t)moves;
    return GV_OK;
}
