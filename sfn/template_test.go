package sfn

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/enginetest"
)

// cfnCheck checks a template with testdata/cfncheck.js against the
// CloudFormation resource specification (npm @aws-cdk/cfnspec).
func cfnCheck(t *testing.T, tmpl any) []string {
	t.Helper()
	probe := enginetest.NodeCommand(t, "-e", `require.resolve("@aws-cdk/cfnspec/spec/specification.json")`)
	if err := probe.Run(); err != nil {
		enginetest.Missing(t, "npm package @aws-cdk/cfnspec", "not in $LEASEHOLD_TEST_NODE_MODULES; scripts/engines.sh installs it")
	}
	var out struct {
		Errors []string `json:"errors"`
		Spec   string   `json:"spec"`
	}
	if err := json.Unmarshal(node(t, "cfncheck.js", writeJSON(t, tmpl)), &out); err != nil {
		t.Fatal(err)
	}
	return out.Errors
}

var templateConfig = Config{
	Table: "leasehold", Lock: "nightly-import", LambdaTimeout: 5 * time.Minute,
	LambdaARN: "arn:aws:lambda:eu-west-1:123456789012:function:import",
}

func cloudFormation(t *testing.T, c Config) map[string]any {
	t.Helper()
	_, m := made(t, CloudFormation, c)
	return m
}

func TestCloudFormationTemplate(t *testing.T) {
	existing := templateConfig
	existing.ExistingTable = true
	for _, c := range []Config{templateConfig, existing} {
		tmpl := cloudFormation(t, c)
		if errs := cfnCheck(t, tmpl); len(errs) > 0 {
			t.Errorf("existing table %v: the template breaks the resource specification: %v", c.ExistingTable, errs)
		}
		res := tmpl["Resources"].(map[string]any)
		_, hasTable := res[CFNTable]
		if hasTable == c.ExistingTable {
			t.Errorf("existing table %v: table resource present %v", c.ExistingTable, hasTable)
		}
		// The machine in the template is the one Generate writes.
		def, _ := Generate(c)
		var want any
		json.Unmarshal(def, &want)
		got := dig(res[CFNMachine], "Properties", "Definition")
		if a, b := mustJSON(t, got), mustJSON(t, want); a != b {
			t.Errorf("the template's machine differs from Generate's")
		}
		// Least privilege: exactly these actions on these resources.
		actions := map[string][]string{}
		for _, role := range []string{CFNMachineRole, CFNCleanupRole, CFNCleanupRuleRole} {
			for _, p := range dig(res[role], "Properties", "Policies").([]any) {
				for _, s := range dig(p, "PolicyDocument", "Statement").([]any) {
					for _, a := range s.(map[string]any)["Action"].([]any) {
						actions[role] = append(actions[role], a.(string)+" "+mustJSON(t, s.(map[string]any)["Resource"]))
					}
				}
			}
		}
		tableArn := `{"Fn::GetAtt":["LockTable","Arn"]}`
		if c.ExistingTable {
			tableArn = `{"Fn::Sub":"arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/leasehold"}`
		}
		wantActions := map[string][]string{
			CFNMachineRole:     {"dynamodb:UpdateItem " + tableArn, `lambda:InvokeFunction "` + c.LambdaARN + `"`},
			CFNCleanupRole:     {"dynamodb:UpdateItem " + tableArn},
			CFNCleanupRuleRole: {`states:StartExecution {"Ref":"CleanupMachine"}`},
		}
		for role, w := range wantActions {
			if !slices.Equal(actions[role], w) {
				t.Errorf("%s allows %v, want %v", role, actions[role], w)
			}
		}
		for role, service := range map[string]string{CFNMachineRole: "states.amazonaws.com", CFNCleanupRole: "states.amazonaws.com", CFNCleanupRuleRole: "events.amazonaws.com"} {
			stmt := dig(res[role], "Properties", "AssumeRolePolicyDocument", "Statement").([]any)[0]
			if dig(stmt, "Principal", "Service") != service || dig(stmt, "Action") != "sts:AssumeRole" {
				t.Errorf("%s trusts %v", role, stmt)
			}
		}
		pattern := dig(res[CFNCleanupRule], "Properties", "EventPattern")
		if mustJSON(t, dig(pattern, "detail", "status")) != `["FAILED","TIMED_OUT","ABORTED"]` ||
			mustJSON(t, dig(pattern, "detail", "stateMachineArn")) != `[{"Ref":"LockMachine"}]` {
			t.Errorf("the rule's pattern %v", mustJSON(t, pattern))
		}
	}
	if !t.Failed() {
		checkCFNCheckCanFail(t)
	}
}

// checkCFNCheckCanFail: each kind of mistake is caught.
func checkCFNCheckCanFail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(res map[string]any)
	}{
		{"unknown type", func(res map[string]any) { res[CFNMachine].(map[string]any)["Type"] = "AWS::StepFunctions::StateMachin" }},
		{"unknown property", func(res map[string]any) {
			dig(res[CFNMachine], "Properties").(map[string]any)["Definitions"] = map[string]any{}
		}},
		{"missing required", func(res map[string]any) { delete(dig(res[CFNMachine], "Properties").(map[string]any), "RoleArn") }},
		{"nested property", func(res map[string]any) {
			dig(res[CFNCleanupRule], "Properties", "Targets").([]any)[0].(map[string]any)["RoleARN"] = "x"
		}},
		{"bad GetAtt attribute", func(res map[string]any) {
			dig(res[CFNMachine], "Properties").(map[string]any)["RoleArn"] = map[string]any{"Fn::GetAtt": []any{CFNMachineRole, "Name"}}
		}},
		{"bad Ref", func(res map[string]any) {
			dig(res[CFNCleanupRule], "Properties", "Targets").([]any)[0].(map[string]any)["Arn"] = map[string]any{"Ref": "Nowhere"}
		}},
		{"bad Sub", func(res map[string]any) {
			dig(res[CFNMachine], "Properties").(map[string]any)["StateMachineName"] = map[string]any{"Fn::Sub": "${Nowhere}-x"}
		}},
	} {
		tmpl := cloudFormation(t, templateConfig)
		tc.mutate(tmpl["Resources"].(map[string]any))
		if errs := cfnCheck(t, tmpl); len(errs) == 0 {
			t.Errorf("%s: the check accepts the broken template", tc.name)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Terraform's JSON syntax: required arguments of each resource type used
// (hashicorp/aws provider documentation) and the attributes referenced.
var tfRequired = map[string][]string{
	"aws_dynamodb_table":          {"name", "hash_key", "attribute"},
	"aws_iam_role":                {"assume_role_policy"},
	"aws_iam_role_policy":         {"role", "policy"},
	"aws_sfn_state_machine":       {"name", "definition", "role_arn"},
	"aws_cloudwatch_event_rule":   {},
	"aws_cloudwatch_event_target": {"rule", "arn"},
}

var tfAttrs = map[string][]string{
	"aws_dynamodb_table": {"arn", "name"}, "aws_iam_role": {"arn", "id", "name"},
	"aws_sfn_state_machine": {"arn", "id", "name"}, "aws_cloudwatch_event_rule": {"arn", "id", "name"},
}

var tfRef = regexp.MustCompile(`\$\$?\{([^}]*)\}`)

// tfCheck checks a Terraform JSON configuration without terraform: the
// blocks, the required arguments, that every ${...} is a reference to a
// declared resource's attribute, and that no other template sequence is
// left unescaped (a literal "${" is "$${", "%{" is "%%{").
func tfCheck(conf map[string]any) []string {
	var errs []string
	for k := range conf {
		if !slices.Contains([]string{"terraform", "resource", "data", "output", "variable", "provider", "locals"}, k) {
			errs = append(errs, "unknown block "+k)
		}
	}
	declared := map[string]string{}
	for typ, byName := range conf["resource"].(map[string]any) {
		req, ok := tfRequired[typ]
		if !ok {
			errs = append(errs, "unexpected resource type "+typ)
		}
		for name, body := range byName.(map[string]any) {
			declared[typ+"."+name] = typ
			for _, r := range req {
				if _, ok := body.(map[string]any)[r]; !ok {
					errs = append(errs, typ+"."+name+" lacks "+r)
				}
			}
		}
	}
	if d, ok := conf["data"].(map[string]any); ok {
		for typ, byName := range d {
			for name := range byName.(map[string]any) {
				declared["data."+typ+"."+name] = typ
			}
		}
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			for _, m := range tfRef.FindAllStringSubmatch(v, -1) {
				if strings.HasPrefix(m[0], "$${") {
					continue // escaped
				}
				parts := strings.Split(m[1], ".")
				if len(parts) < 3 {
					errs = append(errs, "not a reference: "+m[0])
					continue
				}
				attr := parts[len(parts)-1]
				typ, ok := declared[strings.Join(parts[:len(parts)-1], ".")]
				if !ok || !slices.Contains(tfAttrs[typ], attr) {
					errs = append(errs, "unknown reference "+m[0])
				}
			}
			if i := strings.Index(strings.ReplaceAll(v, "%%{", ""), "%{"); i >= 0 {
				errs = append(errs, "unescaped template directive in "+v[:min(len(v), 60)])
			}
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(conf)
	return errs
}

func TestTerraformConfiguration(t *testing.T) {
	strange := templateConfig
	strange.Lock = `a ${b} %{c} {% $d %}`
	existing := templateConfig
	existing.ExistingTable = true
	for _, c := range []Config{templateConfig, strange, existing} {
		b, err := Terraform(c)
		if err != nil {
			t.Fatal(err)
		}
		var conf map[string]any
		if err := json.Unmarshal(b, &conf); err != nil {
			t.Fatalf("not JSON: %v", err)
		}
		if errs := tfCheck(conf); len(errs) > 0 {
			t.Errorf("lock %q: %v", c.Lock, errs)
		}
		// Terraform unescapes $${ and %%{: the definition is then Generate's.
		def := dig(conf, "resource", "aws_sfn_state_machine", "lock", "definition").(string)
		def = strings.NewReplacer("$${", "${", "%%{", "%{").Replace(def)
		want, _ := Generate(c)
		var a, w any
		json.Unmarshal([]byte(def), &a)
		json.Unmarshal(want, &w)
		if mustJSON(t, a) != mustJSON(t, w) {
			t.Errorf("lock %q: the configuration's machine differs from Generate's", c.Lock)
		}
	}
	// The check can fail.
	for _, broken := range []string{
		`{"resource": {"aws_sfn_state_machine": {"m": {"name": "x", "definition": "{}"}}}}`,
		`{"resource": {"aws_iam_role": {"r": {"assume_role_policy": "${aws_iam_role.other.arn}"}}}}`,
		`{"resource": {"aws_iam_role": {"r": {"assume_role_policy": "%{ if x }"}}}}`,
		`{"resources": {}}`,
	} {
		var conf map[string]any
		json.Unmarshal([]byte(broken), &conf)
		if conf["resource"] == nil {
			conf["resource"] = map[string]any{}
		}
		if len(tfCheck(conf)) == 0 {
			t.Errorf("the check accepts %s", broken)
		}
	}
	task := taskConfig
	if _, err := Terraform(task); err == nil {
		t.Error("a template for a --task state, whose permissions are unknown")
	}
	if _, err := CloudFormation(task); err == nil {
		t.Error("a template for a --task state, whose permissions are unknown")
	}
}
