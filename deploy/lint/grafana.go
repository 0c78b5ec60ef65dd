package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// plannedMetrics are the series names PromQL may use: the planned families
// (plannedTypes, metrics.go), histograms by their _bucket, _sum and _count
// series. plannedMetricFamilies are the histogram names as written in prose.
var plannedMetrics, plannedMetricFamilies = func() (map[string]bool, map[string]bool) {
	series, families := map[string]bool{}, map[string]bool{}
	for name, typ := range plannedTypes {
		if typ != "histogram" {
			series[name] = true
			continue
		}
		families[name] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			series[name+suffix] = true
		}
	}
	return series, families
}()

var metricRE = regexp.MustCompile(`\bkeysvc_[a-z0-9_]*[a-z0-9]\b`)

// lintGrafana checks the dashboard's structure and writes every PromQL
// expression, with Grafana's variables replaced, as a recording rule to
// rulesOut, so that promtool can parse them.
func lintGrafana(p *problems, file, rulesOut string) {
	raw, err := os.ReadFile(file)
	if err != nil {
		p.add(file, "%v", err)
		return
	}
	var d struct {
		Title         string            `json:"title"`
		UID           string            `json:"uid"`
		SchemaVersion int               `json:"schemaVersion"`
		Panels        []json.RawMessage `json:"panels"`
		Templating    struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		p.add(file, "not a dashboard: %v", err)
		return
	}
	if d.Title == "" || d.UID == "" || len(d.UID) > 40 {
		p.add(file, "title and uid (at most 40 characters) are required")
	}
	if d.SchemaVersion < 36 {
		p.add(file, "schemaVersion %d: export from Grafana 9 or later (36+)", d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	var exprs []string
	ids := map[int]bool{}
	var walk func(panels []json.RawMessage)
	walk = func(panels []json.RawMessage) {
		for _, rawPanel := range panels {
			var pn struct {
				ID         int    `json:"id"`
				Type       string `json:"type"`
				Title      string `json:"title"`
				Datasource *struct {
					Type string `json:"type"`
					UID  string `json:"uid"`
				} `json:"datasource"`
				GridPos *struct{ X, Y, W, H int } `json:"gridPos"`
				Targets []struct {
					RefID string `json:"refId"`
					Expr  string `json:"expr"`
				} `json:"targets"`
				Panels []json.RawMessage `json:"panels"`
			}
			if err := json.Unmarshal(rawPanel, &pn); err != nil {
				p.add(file, "panel: %v", err)
				continue
			}
			where := fmt.Sprintf("panel %d %q", pn.ID, pn.Title)
			if pn.ID <= 0 || ids[pn.ID] {
				p.add(file, "%s: id must be positive and unique", where)
			}
			ids[pn.ID] = true
			if pn.Type == "" || pn.Title == "" {
				p.add(file, "%s: type and title are required", where)
			}
			if g := pn.GridPos; g == nil || g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
				p.add(file, "%s: gridPos must fit the 24-column grid", where)
			}
			if pn.Type == "row" {
				walk(pn.Panels)
				continue
			}
			if pn.Datasource == nil || pn.Datasource.Type != "prometheus" {
				p.add(file, "%s: datasource must be a Prometheus one", where)
			} else if name := strings.Trim(pn.Datasource.UID, "${}"); strings.HasPrefix(pn.Datasource.UID, "$") && vars[name] != "datasource" {
				p.add(file, "%s: datasource variable %s is not defined", where, pn.Datasource.UID)
			}
			if len(pn.Targets) == 0 {
				p.add(file, "%s: no targets", where)
			}
			refs := map[string]bool{}
			for _, t := range pn.Targets {
				if t.RefID == "" || refs[t.RefID] {
					p.add(file, "%s: refId %q missing or repeated", where, t.RefID)
				}
				refs[t.RefID] = true
				if strings.TrimSpace(t.Expr) == "" {
					p.add(file, "%s: empty expr", where)
					continue
				}
				for _, m := range metricRE.FindAllString(t.Expr, -1) {
					if !plannedMetrics[m] {
						p.add(file, "%s: %s is not one of keysvc's planned metrics", where, m)
					}
				}
				for _, v := range regexp.MustCompile(`\$\{?([A-Za-z_]\w*)`).FindAllStringSubmatch(t.Expr, -1) {
					if !strings.HasPrefix(v[1], "__") && vars[v[1]] == "" {
						p.add(file, "%s: variable $%s is not defined", where, v[1])
					}
				}
				exprs = append(exprs, t.Expr)
			}
		}
	}
	walk(d.Panels)
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	type group struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	}
	g := group{Name: "grafana-dashboard-exprs"}
	subst := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")
	varRE := regexp.MustCompile(`\$\{?[A-Za-z_]\w*\}?`)
	for i, e := range exprs {
		e = varRE.ReplaceAllString(subst.Replace(e), ".*")
		g.Rules = append(g.Rules, rule{Record: fmt.Sprintf("grafana:expr_%d", i), Expr: e})
	}
	out, err := yaml.Marshal(map[string]any{"groups": []group{g}})
	if err == nil {
		err = os.WriteFile(rulesOut, out, 0o644)
	}
	if err != nil {
		p.add(file, "writing %s: %v", rulesOut, err)
	}
}
