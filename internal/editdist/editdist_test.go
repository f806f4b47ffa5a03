package editdist

import "testing"

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"", "abc", 3}, {"wait_replica", "wait_replicas", 1}, {"holdbak", "holdback", 1}, {"kitten", "sitting", 3}} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestNear(t *testing.T) {
	names := []string{"holdback", "wait_replicas", "wait_timeout"}
	for key, want := range map[string]string{
		"wait_replica": "wait_replicas", "HOLDBACK": "holdback", "wait_timout": "wait_timeout",
		"holdback": "", "read_timeout": "", "x": "",
	} {
		if got := Near(key, names); got != want {
			t.Errorf("Near(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestDistanceSwap(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"", "abc", 3}, {"passwrod", "password", 1}, {"secert", "secret", 1}, {"pasword", "password", 1}, {"kitten", "sitting", 3}, {"ab", "ba", 1}} {
		if got := DistanceSwap(c.a, c.b); got != c.want {
			t.Errorf("DistanceSwap(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
