// Package deploy holds what courier ships for operators beside the binary: the Grafana
// dashboard (grafana/courier.json) and the Prometheus alert rules with their unit tests
// (prometheus/). It has no code; its tests check those files with promtool, and
// cmd/courier's TestDashboardAndRulesSeriesExist checks every series they name against a
// running courier.
package deploy
