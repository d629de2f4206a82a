# Scheduler metrics (parsed with prometheus_client) and the web dashboard
# (headless chromium), against the scheduler on the kube-apiserver stand-in
# seeded with cluster_fixture.py.
TEST_SCRIPTS += tests/dashboard/test_scheduler_metrics_with_fake_apiserver.py
TEST_SCRIPTS += tests/dashboard/test_dashboard_chromium_with_fake_apiserver.py
TEST_SCRIPTS += tests/dashboard/test_dashboard_agents_with_fake_apiserver.py
TEST_SCRIPTS += tests/dashboard/test_deploy_monitoring_with_fake_apiserver.py
