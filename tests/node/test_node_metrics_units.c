/*
 * Node monitor units: /proc/<pid>/cgroup parsing (cgroup v1 and v2, the
 * cgroupfs and systemd drivers, containerd / CRI-O / docker), the container
 * record, the "metrics" settings, and an exposition rendered from a real
 * shared region (made with the shm API) without NVML.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc/gv_alloc.h"
#include "common/gv_file.h"
#include "node/config/gv_config.h"
#include "node/monitor/gv_metrics.h"
#include "node/monitor/gv_monitor.h"
#include "node/monitor/monitor_internal.h"
#include "node/monitor/monitor_state.h"
#include "shm/gv_shm.h"

#define UID "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
#define UID2 "1f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
#define CID "3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c"

static void cgroup_layouts(void **state)
{
    (void)state;
    char uid[64], cid[80];
    /* cgroup v2, systemd driver, containerd */
    assert_true(gv_monitor_parse_cgroup("0::/kubepods.slice/kubepods-burstable.slice/"
                                        "kubepods-burstable-pod0f1e2d3c_4b5a_4968_8776_a5b4c3d2e1f0.slice/"
                                        "cri-containerd-" CID ".scope\n",
                                        uid, sizeof(uid), cid, sizeof(cid)));
    assert_string_equal(uid, UID);
    assert_string_equal(cid, CID);
    /* cgroup v1, cgroupfs driver, docker: the pod is found on any controller line */
    assert_true(gv_monitor_parse_cgroup("12:pids:/\n11:memory:/kubepods/besteffort/pod" UID "/" CID "\n",
                                        uid, sizeof(uid), cid, sizeof(cid)));
    assert_string_equal(uid, UID);
    assert_string_equal(cid, CID);
    /* CRI-O, guaranteed pod (no QoS level in the path) */
    assert_true(gv_monitor_parse_cgroup("0::/kubepods.slice/kubepods-pod0f1e2d3c_4b5a_4968_8776_a5b4c3d2e1f0.slice/"
                                        "crio-" CID ".scope",
                                        uid, sizeof(uid), cid, sizeof(cid)));
    assert_string_equal(cid, CID);
    /* the pod's own cgroup (no container): the pod, no container id */
    assert_true(gv_monitor_parse_cgroup("0::/kubepods/burstable/pod" UID "\n", uid, sizeof(uid), cid,
                                        sizeof(cid)));
    assert_string_equal(cid, "");    /* a last component that is no container id (not hex, too short, longer
     * than the caller's buffer): the pod, no container id */
    static const char *const not_ids[] = {"cri-containerd-" CID "zz.scope",
                                          "cri-containerd-0123456789a.scope",
                                          "cri-containerd-" CID CID ".scope", "crio-" CID "X"};
    for (size_t i = 0; i < sizeof(not_ids) / sizeof(not_ids[0]); i++) {
        char text[400];
        snprintf(text, sizeof(text), "0::/kubepods/burstable/pod" UID "/%s\n", not_ids[i]);
        assert_true(gv_monitor_parse_cgroup(text, uid, sizeof(uid), cid, 70));
        assert_string_equal(uid, UID);
        if (cid[0] != '\0')
            fail_msg("%s: container id '%s'", not_ids[i], cid);
    }
    /* an id exactly as long as the buffer has no room for its end: none, not a cut one */
    assert_true(gv_monitor_parse_cgroup("0::/kubepods/burstable/pod" UID "/" CID "\n", uid,
                                        sizeof(uid), cid, sizeof(CID) - 1));
    assert_string_equal(cid, "");
}

static void cgroup_not_a_pod(void **state)
{
    (void)state;
    char uid[64], cid[80];
    assert_false(gv_monitor_parse_cgroup("0::/user.slice/user-0.slice/session-3.scope\n", uid,
                                         sizeof(uid), cid, sizeof(cid)));
    assert_false(gv_monitor_parse_cgroup("0::/system.slice/pod" UID ".scope\n", uid, sizeof(uid),
                                         cid, sizeof(cid))); /* not under kubepods */
    assert_false(gv_monitor_parse_cgroup("0::/kubepods/burstable/podnot-a-uid/x\n", uid,
                                         sizeof(uid), cid, sizeof(cid)));
    assert_false(gv_monitor_parse_cgroup("0::/kubepods/burstable/podzzzzzzzz-zzzz-zzzz-zzzz-"
                                         "zzzzzzzzzzzz/x\n",
                                         uid, sizeof(uid), cid, sizeof(cid))); /* not hex */
    struct {
        char uid[36]; /* no room for a uid's terminator */
        char after[8];
    } small;
    memset(&small, 'x', sizeof(small));
    assert_false(gv_monitor_parse_cgroup("0::/kubepods/burstable/pod" UID "\n", small.uid,
                                         sizeof(small.uid), cid, sizeof(cid)));
    for (size_t i = 0; i < sizeof(small.after); i++)
        assert_int_equal(small.after[i], 'x');
    assert_false(gv_monitor_parse_cgroup("", uid, sizeof(uid), cid, sizeof(cid)));
    assert_false(gv_monitor_parse_cgroup("kubepods pod" UID, uid, sizeof(uid), cid, sizeof(cid)));
    char big[8192];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_false(gv_monitor_parse_cgroup(big, uid, sizeof(uid), cid, sizeof(cid)));
}

static void record_roundtrip_and_bad(void **state)
{
    (void)state;
    struct gv_monitor_record r;
    struct gv_error err;
    const char *ok = "{\"version\":1,\"uid\":\"" UID "\",\"namespace\":\"team\",\"pod\":\"p\","
                     "\"container\":\"c\",\"priority\":3,\"limited\":true,\"devices\":["
                     "{\"uuid\":\"GPU-1\",\"memory\":1048576000,\"cores\":30}]}";
    assert_int_equal(gv_monitor_record_parse(ok, strlen(ok), &r, &err), GV_OK);
    assert_string_equal(r.ns, "team");
    assert_int_equal(r.n_dev, 1);
    assert_int_equal(r.dev[0].mem_limit, 1048576000ull);
    assert_int_equal(r.dev[0].cores, 30);
    assert_int_equal(r.priority, 3);
    assert_true(r.limited);
    static const char *const bad[] = {
        "", "[]", "{\"uid\":\"" UID "\"}",
        "{\"uid\":\"" UID "\",\"namespace\":\"n\",\"pod\":\"p\",\"container\":\"c\",\"devices\":[{\"uuid\":\"G\",\"memory\":-1,\"cores\":0}]}",
        "{\"uid\":\"" UID "\",\"namespace\":\"n\",\"pod\":\"p\",\"container\":\"c\",\"devices\":[{\"uuid\":\"G\",\"memory\":1,\"cores\":101}]}",
        "{\"uid\":\"" UID "\",\"namespace\":\"n\",\"pod\":\"p\",\"container\":\"c\",\"devices\":{}}",
        "{\"uid\":\"" UID "\",\"namespace\":\"a-namespace-name-longer-than-sixty-three-characters-which-k8s-forbids\",\"pod\":\"p\",\"container\":\"c\",\"devices\":[]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(gv_monitor_record_parse(bad[i], strlen(bad[i]), &r, &err), GV_EPARSE);
}

/* The record's path is <state>/containers/<uid>/.ctr-<container>.json: a uid or a container
 * name that is empty, starts with '.', holds a '/' or a control character is never joined
 * into it (a uid "x/../../escape" would write beside containers/, ".." into the state
 * directory); a plain one is written. */
static void record_path_names_checked(void **state)
{
    (void)state;
    char dir[] = "/tmp/gvmonXXXXXX", path[512];
    assert_non_null(mkdtemp(dir));
    static const char *const made[] = {"containers", ("containers/" UID), "containers/x", "escape",
                                       "containers/ctl\x01id", "containers/.hidden"};
    for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, made[i]);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    struct gv_alloc_container_assign c = {.name = "main", .n_devices = 0};
    static const char *const uids[] = {"../escape", "x/../../escape", "..", "ctl\x01id", ".hidden",
                                       "", UID};
    for (size_t i = 0; i < sizeof(uids) / sizeof(uids[0]); i++) {
        json_t *pod = json_pack("{s:{s:s, s:s, s:s}}", "metadata", "uid", uids[i], "namespace",
                                "ns1", "name", "p");
        gv_monitor_note_allocate(dir, pod, &c, true, "", 0);
        json_decref(pod);
    }
    struct gv_alloc_container_assign dot = {.name = "..", .n_devices = 0};
    json_t *pod = json_pack("{s:{s:s, s:s, s:s}}", "metadata", "uid", UID, "namespace", "ns1",
                            "name", "p");
    gv_monitor_note_allocate(dir, pod, &dot, true, "", 0);
    json_decref(pod);
    static const char *const never[] = {
        ("escape/" GV_MONITOR_RECORD_PREFIX "main.json"),
        (GV_MONITOR_RECORD_PREFIX "main.json"),
        ("containers/ctl\x01id/" GV_MONITOR_RECORD_PREFIX "main.json"),
        ("containers/.hidden/" GV_MONITOR_RECORD_PREFIX "main.json"),
        ("containers/" GV_MONITOR_RECORD_PREFIX "main.json"),
        ("containers/" UID "/" GV_MONITOR_RECORD_PREFIX "...json")};
    struct stat st;
    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, never[i]);
        if (stat(path, &st) == 0)
            fail_msg("a record was written at %s", never[i]);
    }
    snprintf(path, sizeof(path), "%s/containers/" UID "/" GV_MONITOR_RECORD_PREFIX "main.json", dir);
    assert_int_equal(stat(path, &st), 0);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The node config's "metrics": top level, then the node's entry key by key. */
static void config_layering(void **state)
{
    (void)state;
    const char *doc = "{\"metrics\":{\"listen\":\":9401\",\"backstop\":\"kill\",\"backstopGraceMs\":5},"
                      "\"nodeConfig\":[{\"name\":\"n1\",\"metrics\":{\"backstop\":\"off\"}}]}";
    struct gv_node_config *c;
    struct gv_error err;
    assert_int_equal(gv_node_config_parse(doc, strlen(doc), "n1", &c, &err), GV_OK);
    assert_string_equal(c->metrics.listen, ":9401");
    assert_int_equal(c->metrics.backstop, GV_BACKSTOP_OFF);
    assert_int_equal(c->metrics.grace_ms, 5);
    gv_node_config_free(c);
    assert_int_equal(gv_node_config_parse(doc, strlen(doc), "other", &c, &err), GV_OK);
    assert_int_equal(c->metrics.backstop, GV_BACKSTOP_KILL);
    gv_node_config_free(c);
    assert_int_equal(gv_node_config_default(&c, &err), GV_OK);
    assert_int_equal(c->metrics.backstop, GV_BACKSTOP_REPORT);
    assert_string_equal(c->metrics.listen, "");
    gv_node_config_free(c);
    const char *bad = "{\"nodeConfig\":[{\"name\":\"n1\",\"metrics\":{\"backstopGraceMs\":-1}}]}";
    assert_int_equal(gv_node_config_parse(bad, strlen(bad), "n1", &c, &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "nodeConfig[n1].metrics.backstopGraceMs"));
}

static void http_heads(void **state)
{
    (void)state;
    struct gv_metrics_http_head h;
    const char *get = "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n";
    assert_int_equal(gv_metrics_http_parse_head(get, strlen(get), &h), 0);
    assert_string_equal(h.path, "/metrics");
    assert_false(h.head_only);
    /* a request line of 511 bytes is read; one of 512 has no room for its NUL: 400 */
    char line512[600];
    int n = snprintf(line512, sizeof(line512), "GET /metrics HTTP/1.1%*s\r\n\r\n", 511 - 21, "");
    assert_int_equal(n, 515);
    assert_int_equal(gv_metrics_http_parse_head(line512, (size_t)n, &h), 0);
    n = snprintf(line512, sizeof(line512), "GET /metrics HTTP/1.1%*s\r\n\r\n", 512 - 21, "");
    assert_int_equal(gv_metrics_http_parse_head(line512, (size_t)n, &h), 400);
    const char *head = "HEAD /healthz HTTP/1.0\r\nContent-Length: 0\r\n\r\n";
    assert_int_equal(gv_metrics_http_parse_head(head, strlen(head), &h), 0);
    assert_true(h.head_only);
    static const char *const bad400[] = {
        "GET /metrics\r\n\r\n",                                       /* no version */
        "GET /metrics SPDY/3\r\n\r\n",                                /* not HTTP/1.x */
        "\r\n\r\n",                                                  /* empty request line */
        "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\n",          /* a body announced */
        "GET /metrics HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n", /* a chunked body */
    };
    for (size_t i = 0; i < sizeof(bad400) / sizeof(bad400[0]); i++)
        assert_int_equal(gv_metrics_http_parse_head(bad400[i], strlen(bad400[i]), &h), 400);
    char longline[1024];
    memset(longline, 'a', sizeof(longline));
    memcpy(longline, "GET /", 5);
    memcpy(longline + sizeof(longline) - 5, "\r\n\r\n", 5);
    assert_int_equal(gv_metrics_http_parse_head(longline, sizeof(longline) - 1, &h), 400);
    const char *post = "POST /metrics HTTP/1.1\r\n\r\n";
    assert_int_equal(gv_metrics_http_parse_head(post, strlen(post), &h), 405);
}

static void settings(void **state)
{
    (void)state;
    struct gv_metrics_settings s;
    struct gv_error err;
    gv_metrics_settings_default(&s);
    assert_true(s.hami_names && s.dcgm_names);
    assert_int_equal(s.backstop, GV_BACKSTOP_REPORT);
    json_t *o = json_pack("{s:s, s:b, s:s, s:i, s:i, s:i}", "listen", "127.0.0.1:9401", "hamiNames",
                          0, "backstop", "kill", "backstopGraceMs", 500, "backstopPeriodMs", 100,
                          "backstopMarginMiB", 64);
    assert_int_equal(gv_metrics_settings_parse(o, "", &s, &err), GV_OK);
    assert_string_equal(s.listen, "127.0.0.1:9401");
    assert_false(s.hami_names);
    assert_int_equal(s.backstop, GV_BACKSTOP_KILL);
    assert_int_equal(s.grace_ms, 500);
    assert_int_equal(s.margin_bytes, 64ull << 20);
    json_decref(o);
    static const char *const bad[][2] = {
        {"{\"backstop\":\"explode\"}", "metrics.backstop"},
        {"{\"listen\":\"nocolon\"}", "metrics.listen"},
        {"{\"backstopPeriodMs\":1}", "metrics.backstopPeriodMs"},
        {"{\"hamiNames\":\"yes\"}", "metrics.hamiNames"},
        {"{\"what\":1}", "metrics.what"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *b = json_loads(bad[i][0], 0, NULL);
        assert_int_equal(gv_metrics_settings_parse(b, "nodeConfig[x].", &s, &err), GV_EINVAL);
        assert_non_null(strstr(err.msg, bad[i][1]));
        assert_non_null(strstr(err.msg, "nodeConfig[x]."));
        json_decref(b);
    }
}

/* One line of the exposition, or NULL. */
static const char *line_of(const char *text, const char *prefix)
{
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, prefix, strlen(prefix)) == 0)
            return p;
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return NULL;
}

static void render_from_region(void **state)
{
    (void)state;
    char dir[] = "/tmp/gvmonXXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof(path), "%s/containers", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/containers/" UID, dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/containers/" UID "/main", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    /* the record, as Allocate writes it */
    json_t *pod = json_pack("{s:{s:s, s:s, s:s}}", "metadata", "uid", UID, "namespace", "ns1", "name",
                            "web \"1\"");
    struct gv_alloc_container_assign c = {.name = "main", .n_devices = 1};
    snprintf(c.devices[0].uuid, sizeof(c.devices[0].uuid), "GPU-aaaa");
    c.devices[0].mem_mib = 1000;
    c.devices[0].milli = 250;
    const char limits[] = "CUDA_DEVICE_MEMORY_LIMIT_0=1000m\nCUDA_TASK_PRIORITY=4\n";
    gv_monitor_note_allocate(dir, pod, &c, true, limits, sizeof(limits) - 1);
    json_decref(pod);
    /* a container on an exclusive GPU: its assignment's figure is no limit */
    snprintf(path, sizeof(path), "%s/containers/" UID2, dir);
    assert_int_equal(mkdir(path, 0755), 0);
    json_t *pod2 = json_pack("{s:{s:s, s:s, s:s}}", "metadata", "uid", UID2, "namespace", "ns1",
                             "name", "whole");
    struct gv_alloc_container_assign c2 = {.name = "excl", .n_devices = 1};
    snprintf(c2.devices[0].uuid, sizeof(c2.devices[0].uuid), "GPU-bbbb");
    c2.devices[0].mem_mib = 40000;
    gv_monitor_note_allocate(dir, pod2, &c2, false, "", 0);
    json_decref(pod2);
    /* a region with 300 MiB charged by this process */
    snprintf(path, sizeof(path), "%s/containers/" UID "/main/shared.cache", dir);
    struct gv_shm *shm;
    struct gv_error err;
    assert_int_equal(gv_shm_open(path, GV_SHM_CREATE, &shm, &err), GV_OK);
    int idx;
    struct gv_shm_limits lim = {.mem_limit = 1000ull << 20, .mem_physical = 16ull << 30, .sm_limit = 25};
    assert_int_equal(gv_shm_device_attach(shm, "GPU-aaaa", &lim, &idx, &err), GV_OK);
    assert_int_equal(gv_shm_proc_attach(shm, getpid(), 4, &err), GV_OK);
    assert_int_equal(gv_shm_mem_reserve(shm, idx, 300ull << 20, GV_SHM_DEVICE, NULL), GV_OK);

    struct gv_monitor_config mc = {.node = "n1", .state_dir = dir, .nvml_lib = "/nonexistent/libnvml.so"};
    gv_metrics_settings_default(&mc.settings);
    struct gv_monitor *m;
    assert_int_equal(gv_monitor_new(&mc, &m, &err), GV_OK);
    struct gv_buf b;
    gv_buf_init(&b, 0);
    assert_int_equal(gv_monitor_render(m, &b, &err), GV_OK);
    const char *lab = "{node=\"n1\",namespace=\"ns1\",pod=\"web \\\"1\\\"\",container=\"main\",uuid=\"GPU-aaaa\"}";
    char want[512];
    snprintf(want, sizeof(want), "gpuvisor_container_gpu_memory_used_bytes%s 314572800\n", lab);
    assert_non_null(line_of(b.data, want));
    snprintf(want, sizeof(want), "gpuvisor_container_gpu_memory_limit_bytes%s 1048576000\n", lab);
    assert_non_null(line_of(b.data, want));
    snprintf(want, sizeof(want), "gpuvisor_container_gpu_compute_share_limit_ratio%s 0.25\n", lab);
    assert_non_null(line_of(b.data, want));
    assert_non_null(line_of(b.data, "gpuvisor_container_priority{node=\"n1\",namespace=\"ns1\",pod=\"web \\\"1\\\"\",container=\"main\"} 4\n"));
    assert_non_null(line_of(b.data, "gpuvisor_container_processes{node=\"n1\",namespace=\"ns1\",pod=\"web \\\"1\\\"\",container=\"main\"} 1\n"));
    assert_null(line_of(b.data, "gpuvisor_container_gpu_memory_limit_bytes{node=\"n1\",namespace=\"ns1\",pod=\"whole\""));
    assert_non_null(line_of(b.data, "gpuvisor_container_gpu_compute_share_limit_ratio{node=\"n1\",namespace=\"ns1\",pod=\"whole\",container=\"excl\",uuid=\"GPU-bbbb\"} 1\n"));
    assert_non_null(line_of(b.data, "gpuvisor_container_region_present{node=\"n1\",namespace=\"ns1\",pod=\"whole\",container=\"excl\",limited=\"false\"} 0\n"));
    /* no NVML: no per-GPU counters, no NVML-derived container series */
    assert_null(line_of(b.data, "DCGM_FI_DEV_GPU_UTIL{"));
    assert_null(line_of(b.data, "gpuvisor_container_gpu_memory_nvml_bytes{"));
    /* The region is the tenant's: one that fills every process slot, half of
     * them with host pids, costs the monitor its per-container tables' room
     * (16 of each), never more; every slot still counts as a process. */
    struct gv_shm_region *r = (struct gv_shm_region *)gv_shm_region(shm); /* as a tenant writes it */
    for (int s = 0; s < GV_SHM_MAX_PROCS; s++) {
        if (atomic_load(&r->procs[s].pid) != 0)
            continue;
        r->procs[s].hostpid = s % 2 ? 100000 + s : 0;
        atomic_store(&r->procs[s].mem_used[idx], 1ull << 20);
        atomic_store(&r->procs[s].pid, 2 + s);
    }
    gv_buf_free(&b);
    gv_buf_init(&b, 0);
    assert_int_equal(gv_monitor_render(m, &b, &err), GV_OK);
    snprintf(want, sizeof(want), "gpuvisor_container_gpu_memory_used_bytes%s 314572800\n", lab);
    assert_non_null(line_of(b.data, want));
    snprintf(want, sizeof(want),
             "gpuvisor_container_processes{node=\"n1\",namespace=\"ns1\",pod=\"web \\\"1\\\"\","
             "container=\"main\"} %d\n",
             GV_SHM_MAX_PROCS);
    assert_non_null(line_of(b.data, want));
    /* a record in another pod's directory is not believed */
    gv_buf_free(&b);
    gv_shm_close(shm);
    gv_monitor_free(m);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The backstop's NSpid lookup against the kernel's own /proc: the last NSpid
 * field is the pid in the innermost namespace, which is getpid() for this
 * process whatever namespace the suite runs in (a CI container included). */
static void nspid_of_real_proc(void **state)
{
    (void)state;
    struct gv_monitor m;
    memset(&m, 0, sizeof(m));
    m.proc_root = (char *)"/proc";
    int32_t ns = 0;
    assert_true(pid_nspid(&m, (unsigned)getpid(), &ns));
    assert_int_equal(ns, getpid());
    assert_false(pid_nspid(&m, 0, &ns)); /* no /proc/0 */
    /* a process in a container: host pid first, the container's last */
    char root[] = "/tmp/gv-nspid-XXXXXX", dir[64], path[96];
    assert_non_null(mkdtemp(root));
    snprintf(dir, sizeof(dir), "%s/4242", root);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/status", dir);
    const char *text = "Name:\tpython3\nTgid:\t4242\nNSpid:\t4242\t17\nNSpgid:\t4242\t17\n";
    assert_int_equal(gv_file_write_atomic(path, text, strlen(text), 0644, NULL), GV_OK);
    m.proc_root = root;
    assert_true(pid_nspid(&m, 4242, &ns));
    assert_int_equal(ns, 17);
    const char *bad = "Name:\tx\nNSpid:\t4242\tx17\n"; /* not a number: no answer */
    assert_int_equal(gv_file_write_atomic(path, bad, strlen(bad), 0644, NULL), GV_OK);
    assert_false(pid_nspid(&m, 4242, &ns));
    unlink(path);
    rmdir(dir);
    rmdir(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cgroup_layouts),
        cmocka_unit_test(cgroup_not_a_pod),
        cmocka_unit_test(record_roundtrip_and_bad),
        cmocka_unit_test(record_path_names_checked),
        cmocka_unit_test(settings),
        cmocka_unit_test(http_heads),
        cmocka_unit_test(config_layering),
        cmocka_unit_test(render_from_region),
        cmocka_unit_test(nspid_of_real_proc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
