/*
 * Shared fixtures for the kube tests: a fake_apiserver per test and a client
 * pointed at it with fast retry settings.
 */
#ifndef GV_KUBE_TESTLIB_H
#define GV_KUBE_TESTLIB_H

#include "kube/gv_kube.h"
#include "tests/fakes/apiserver/fake_apiserver.h"

struct kube_fixture {
    struct fake_apiserver fa;
    struct gv_kube_client *client;
};

/* cmocka setup/teardown: *state becomes a struct kube_fixture. */
int kube_fixture_setup(void **state);
int kube_fixture_teardown(void **state);
/* Same with extra fake_apiserver arguments. */
int kube_fixture_setup_args(void **state, const char *const *args);

/* The fixture's client settings: short backoff, 3 retries, 10 s timeout. */
void kube_config_fast_retries(struct gv_kube_config *cfg);

/* Creates pod ns/name (labels "k=v,..." or NULL; node or NULL); returns it. */
json_t *kube_create_pod(struct gv_kube_client *c, const char *ns, const char *name,
                        const char *label_key, const char *label_value, const char *node);
/* Creates node name with label key=value (or none). */
json_t *kube_create_node(struct gv_kube_client *c, const char *name, const char *label_key,
                         const char *label_value);
/* Count of requests the fake saw for "METHOD /path". */
long kube_fake_count(struct kube_fixture *fx, const char *method_path);
/* metadata.resourceVersion of obj (borrowed). */
const char *kube_rv(json_t *obj);

#endif
