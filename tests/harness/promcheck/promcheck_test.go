package promcheck

import (
	"reflect"
	"testing"
)

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.95, sum by (le, child) (rate(ovnhost_readiness_wait_seconds_bucket{instance=~"$instance"}[1h])))`: {"ovnhost_readiness_wait_seconds_bucket"},
		`sum by (instance) (rate(a_total[5m])) / sum by (instance) (rate(b_count[5m])) > 0.05`:                                  {"a_total", "b_count"},
		`max by (instance) (x) == 1 and on (instance) y == 0`:                                                                   {"x", "y"},
		`topk(10, rate(ovnhost_ovs_coverage_total{instance=~"$instance"}[5m]))`:                                                 {"ovnhost_ovs_coverage_total"},
		`time() - ovnhost_pinger_last_round_timestamp_seconds`:                                                                  {"ovnhost_pinger_last_round_timestamp_seconds"},
		`ovnhost:subnet_usage:ratio > 0.9`:                                                                                      {"ovnhost:subnet_usage:ratio"},
		`1e3 * foo offset 5m`:                                                                                                   {"foo"},
	} {
		if got := MetricNames(expr); !reflect.DeepEqual(got, want) {
			t.Errorf("MetricNames(%q) = %v, want %v", expr, got, want)
		}
	}
	def := map[string]bool{"h_seconds": true}
	if !Exported("h_seconds_bucket", def) || !Exported("go_goroutines", def) || Exported("nope", def) {
		t.Error("Exported")
	}
}
