package sfn

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/testrig/enginetest"
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
			CFNMachineRole: append([]string{"dynamodb:UpdateItem " + tableArn, `lambda:InvokeFunction "` + c.LambdaARN + `"`},
				logDeliveryWant...),
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
	"aws_dynamodb_table":               {"name", "hash_key", "attribute"},
	"aws_iam_role":                     {"assume_role_policy"},
	"aws_iam_role_policy":              {"role", "policy"},
	"aws_sfn_state_machine":            {"name", "definition", "role_arn"},
	"aws_cloudwatch_event_rule":        {},
	"aws_cloudwatch_event_target":      {"rule", "arn"},
	"aws_cloudwatch_log_group":         {},
	"aws_cloudwatch_log_metric_filter": {"name", "pattern", "log_group_name", "metric_transformation"},
	"aws_cloudwatch_metric_alarm":      {"alarm_name", "comparison_operator", "evaluation_periods"},
}

// tfArgs are the arguments and blocks each resource type takes (the
// provider's documentation; the meta-arguments are added), so that a
// misspelt one is caught. Nested blocks are "type.block".
var tfArgs = map[string][]string{
	"aws_dynamodb_table":               {"name", "billing_mode", "hash_key", "range_key", "attribute", "read_capacity", "write_capacity", "ttl", "point_in_time_recovery", "server_side_encryption", "deletion_protection_enabled", "tags"},
	"aws_iam_role":                     {"name", "name_prefix", "assume_role_policy", "description", "path", "permissions_boundary", "max_session_duration", "force_detach_policies", "tags"},
	"aws_iam_role_policy":              {"name", "name_prefix", "role", "policy"},
	"aws_sfn_state_machine":            {"name", "name_prefix", "definition", "role_arn", "type", "publish", "logging_configuration", "tracing_configuration", "encryption_configuration", "tags"},
	"aws_cloudwatch_event_rule":        {"name", "name_prefix", "description", "event_pattern", "schedule_expression", "event_bus_name", "state", "role_arn", "tags"},
	"aws_cloudwatch_event_target":      {"rule", "arn", "role_arn", "target_id", "event_bus_name", "input", "input_path", "input_transformer", "retry_policy", "dead_letter_config"},
	"aws_cloudwatch_log_group":         {"name", "name_prefix", "retention_in_days", "kms_key_id", "log_group_class", "skip_destroy", "tags"},
	"aws_cloudwatch_log_metric_filter": {"name", "pattern", "log_group_name", "metric_transformation"},
	"aws_cloudwatch_metric_alarm": {"alarm_name", "comparison_operator", "evaluation_periods", "metric_name", "namespace", "period", "statistic", "threshold",
		"threshold_metric_id", "actions_enabled", "alarm_actions", "alarm_description", "datapoints_to_alarm", "dimensions", "insufficient_data_actions",
		"ok_actions", "unit", "extended_statistic", "treat_missing_data", "evaluate_low_sample_count_percentiles", "metric_query", "tags"},
	"aws_sfn_state_machine.logging_configuration":            {"log_destination", "include_execution_data", "level"},
	"aws_cloudwatch_log_metric_filter.metric_transformation": {"name", "namespace", "value", "default_value", "dimensions", "unit"},
	"variable": {"type", "default", "description", "validation", "sensitive", "nullable", "ephemeral"},
}

// tfNestedRequired are the required arguments of nested blocks.
var tfNestedRequired = map[string][]string{
	"aws_cloudwatch_log_metric_filter.metric_transformation": {"name", "namespace", "value"},
	"variable.validation": {"condition", "error_message"},
}

var tfMeta = []string{"lifecycle", "depends_on", "count", "for_each", "provider"}

var tfAttrs = map[string][]string{
	"aws_dynamodb_table": {"arn", "name"}, "aws_iam_role": {"arn", "id", "name"},
	"aws_sfn_state_machine": {"arn", "id", "name"}, "aws_cloudwatch_event_rule": {"arn", "id", "name"},
	"aws_cloudwatch_log_group": {"arn", "name"}, "aws_cloudwatch_metric_alarm": {"arn", "id", "alarm_name"},
}

// tfFuncs are the Terraform functions the configuration may call.
var tfFuncs = []string{"contains", "compact", "can", "regex"}

var (
	tfStringLit = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	tfName      = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_][A-Za-z0-9_-]*)*(\s*\()?`)
)

// tfInterpolations returns the expressions of the ${...} sequences of s
// that are not escaped ("$${"), reading the string literals inside them
// whole (a "}" in one does not end the sequence); open is set when one
// does not end.
func tfInterpolations(s string) (exprs []string, open bool) {
	for i := 0; i < len(s); i++ {
		if strings.HasPrefix(s[i:], "$${") {
			i += 2
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			continue
		}
		j, depth, inString, done := i+2, 0, false, false
		for ; j < len(s) && !done; j++ {
			switch c := s[j]; {
			case inString && c == '\\':
				j++
			case c == '"':
				inString = !inString
			case inString:
			case c == '{':
				depth++
			case c == '}' && depth == 0:
				exprs = append(exprs, s[i+2:j])
				done = true
				j-- // the loop's j++ steps past the "}"
			case c == '}':
				depth--
			}
		}
		if !done {
			return exprs, true
		}
		i = j
	}
	return exprs, false
}

// tfCheck checks a Terraform JSON configuration without terraform: the
// blocks, the required and known arguments (of nested blocks too), the
// variables (their arguments and validations, and that each is used),
// that every ${...} refers only to declared variables and resource
// attributes and calls only known functions, and that no other template
// sequence is left unescaped (a literal "${" is "$${", "%{" is "%%{").
func tfCheck(conf map[string]any) []string {
	var errs []string
	for k := range conf {
		if !slices.Contains([]string{"terraform", "resource", "data", "output", "variable", "provider", "locals"}, k) {
			errs = append(errs, "unknown block "+k)
		}
	}
	// args checks the arguments of one block of kind typ.
	args := func(typ, where string, body map[string]any) {
		known, ok := tfArgs[typ]
		for k, v := range body {
			if ok && !slices.Contains(known, k) && !slices.Contains(tfMeta, k) {
				errs = append(errs, where+": unknown argument "+k)
			}
			req, nested := tfNestedRequired[typ+"."+k]
			if _, hasArgs := tfArgs[typ+"."+k]; !nested && !hasArgs {
				continue
			}
			blocks, isList := v.([]any)
			if !isList {
				blocks = []any{v}
			}
			for _, b := range blocks {
				m, isObj := b.(map[string]any)
				if !isObj {
					errs = append(errs, where+"."+k+": not a block")
					continue
				}
				for _, r := range req {
					if _, has := m[r]; !has {
						errs = append(errs, where+"."+k+" lacks "+r)
					}
				}
				if _, hasArgs := tfArgs[typ+"."+k]; hasArgs {
					for a := range m {
						if !slices.Contains(tfArgs[typ+"."+k], a) {
							errs = append(errs, where+"."+k+": unknown argument "+a)
						}
					}
				}
			}
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
			args(typ, typ+"."+name, body.(map[string]any))
		}
	}
	if d, ok := conf["data"].(map[string]any); ok {
		for typ, byName := range d {
			for name := range byName.(map[string]any) {
				declared["data."+typ+"."+name] = typ
			}
		}
	}
	vars := map[string]bool{} // declared variable → used
	if v, ok := conf["variable"].(map[string]any); ok {
		for name, body := range v {
			vars[name] = false
			b := body.(map[string]any)
			args("variable", "variable."+name, b)
			switch def, typ := b["default"], b["type"]; {
			case def == nil:
			case typ == "string" && fmt.Sprintf("%T", def) != "string",
				typ == "number" && fmt.Sprintf("%T", def) != "float64":
				errs = append(errs, fmt.Sprintf("variable.%s: default %v is not a %v", name, def, typ))
			}
		}
	}
	var walk func(v any, inVariable bool)
	walk = func(v any, inVariable bool) {
		switch v := v.(type) {
		case string:
			exprs, open := tfInterpolations(v)
			if open {
				errs = append(errs, "unterminated template sequence in "+v[:min(len(v), 60)])
			}
			for _, e := range exprs {
				for _, m := range tfName.FindAllStringSubmatch(tfStringLit.ReplaceAllString(e, `""`), -1) {
					name := strings.TrimRight(strings.TrimSuffix(strings.TrimRight(m[0], " \t"), "("), " \t")
					if m[1] != "" {
						if !slices.Contains(tfFuncs, name) {
							errs = append(errs, "unknown function "+name)
						}
						continue
					}
					parts := strings.Split(name, ".")
					switch {
					case len(parts) == 1 && slices.Contains([]string{"true", "false", "null"}, name):
					case parts[0] == "var":
						if _, ok := vars[parts[len(parts)-1]]; len(parts) != 2 || !ok {
							errs = append(errs, "unknown variable "+name)
						} else if !inVariable {
							vars[parts[1]] = true
						}
					case len(parts) < 3:
						errs = append(errs, "not a reference: ${"+e+"}")
					default:
						attr := parts[len(parts)-1]
						typ, ok := declared[strings.Join(parts[:len(parts)-1], ".")]
						if !ok || !slices.Contains(tfAttrs[typ], attr) {
							errs = append(errs, "unknown reference ${"+e+"}")
						}
					}
				}
			}
			if i := strings.Index(strings.ReplaceAll(v, "%%{", ""), "%{"); i >= 0 {
				errs = append(errs, "unescaped template directive in "+v[:min(len(v), 60)])
			}
		case map[string]any:
			for _, x := range v {
				walk(x, inVariable)
			}
		case []any:
			for _, x := range v {
				walk(x, inVariable)
			}
		}
	}
	for k, v := range conf {
		walk(v, k == "variable")
	}
	for name, used := range vars {
		if !used {
			errs = append(errs, "variable "+name+" is not used")
		}
	}
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

// logDeliveryWant: the lock machine's role may do what Step Functions
// needs to log to CloudWatch Logs, on "*" (AWS Step Functions Developer
// Guide, "IAM Policies for logging to CloudWatch Logs").
var logDeliveryWant = []string{
	`logs:CreateLogDelivery "*"`, `logs:GetLogDelivery "*"`, `logs:UpdateLogDelivery "*"`, `logs:DeleteLogDelivery "*"`,
	`logs:ListLogDeliveries "*"`, `logs:PutResourcePolicy "*"`, `logs:DescribeResourcePolicies "*"`, `logs:DescribeLogGroups "*"`,
}

// What the templates' logging and alarms are, written out here rather
// than taken from the package.
var (
	leaseLostPattern       = `{ $.type = "ExecutionFailed" && $.details.error = "Leasehold.LeaseLost" }`
	lockNotAcquiredPattern = `{ $.type = "ExecutionFailed" && $.details.error = "Leasehold.LockNotAcquired" }`
	// CloudWatch Logs' retention periods (PutRetentionPolicy).
	retentionDays = []string{"1", "3", "5", "7", "14", "30", "60", "90", "120", "150", "180", "365", "400", "545",
		"731", "1096", "1827", "2192", "2557", "2922", "3288", "3653"}
	pseudoParams = []string{"AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue", "AWS::Partition",
		"AWS::Region", "AWS::StackId", "AWS::StackName", "AWS::URLSuffix"}
)

// cfnTemplateCheck checks what testdata/cfncheck.js does not: the
// Parameters (known keys and types, each used, a Default that its
// AllowedValues and AllowedPattern allow), the Conditions (they read only
// parameters) and every condition named by Fn::If or a resource's
// Condition.
func cfnTemplateCheck(tmpl map[string]any) []string {
	var errs []string
	params, _ := tmpl["Parameters"].(map[string]any)
	conds, _ := tmpl["Conditions"].(map[string]any)
	used := map[string]bool{}
	for name, p := range params {
		p := p.(map[string]any)
		for k := range p {
			if !slices.Contains([]string{"Type", "Default", "AllowedValues", "AllowedPattern", "ConstraintDescription",
				"Description", "MaxLength", "MinLength", "MaxValue", "MinValue", "NoEcho"}, k) {
				errs = append(errs, "Parameters."+name+": unknown key "+k)
			}
		}
		typ, _ := p["Type"].(string)
		if typ != "String" && typ != "Number" {
			errs = append(errs, fmt.Sprintf("Parameters.%s: type %v", name, p["Type"]))
		}
		def, hasDefault := p["Default"]
		if !hasDefault {
			continue
		}
		d, ok := def.(string)
		if !ok {
			errs = append(errs, fmt.Sprintf("Parameters.%s: Default %v is not a string", name, def))
			continue
		}
		if _, err := strconv.ParseFloat(d, 64); typ == "Number" && err != nil {
			errs = append(errs, "Parameters."+name+": Default is not a number")
		}
		if av, ok := p["AllowedValues"].([]any); ok && !slices.ContainsFunc(av, func(x any) bool { return fmt.Sprint(x) == d }) {
			errs = append(errs, "Parameters."+name+": Default "+d+" is not among AllowedValues")
		}
		if pat, ok := p["AllowedPattern"].(string); ok {
			if re, err := regexp.Compile(pat); err != nil || !re.MatchString(d) {
				errs = append(errs, "Parameters."+name+": Default "+d+" does not match AllowedPattern")
			}
		}
	}
	// walk notes the parameters used and checks the conditions named.
	var walk func(v any, where string, inCondition bool)
	walk = func(v any, where string, inCondition bool) {
		switch v := v.(type) {
		case []any:
			for i, x := range v {
				walk(x, fmt.Sprintf("%s[%d]", where, i), inCondition)
			}
		case map[string]any:
			for k, x := range v {
				switch k {
				case "Ref":
					name, _ := x.(string)
					if _, ok := params[name]; ok {
						used[name] = true
					} else if inCondition && !slices.Contains(pseudoParams, name) {
						errs = append(errs, where+": a condition refers to "+name+", not a parameter")
					}
				case "Fn::Sub":
					s := fmt.Sprint(x)
					for name := range params {
						if strings.Contains(s, "${"+name+"}") {
							used[name] = true
						}
					}
				case "Fn::If":
					if args, ok := x.([]any); !ok || len(args) != 3 {
						errs = append(errs, where+": Fn::If wants [condition, then, else]")
					} else if _, ok := conds[fmt.Sprint(args[0])]; !ok {
						errs = append(errs, where+": Fn::If of unknown condition "+fmt.Sprint(args[0]))
					}
				}
				walk(x, where+"."+k, inCondition)
			}
		}
	}
	walk(conds, "Conditions", true)
	for id, r := range tmpl["Resources"].(map[string]any) {
		if c, ok := r.(map[string]any)["Condition"]; ok {
			if _, ok := conds[fmt.Sprint(c)]; !ok {
				errs = append(errs, "Resources."+id+": unknown condition "+fmt.Sprint(c))
			}
		}
	}
	walk(tmpl["Resources"], "Resources", false)
	walk(tmpl["Outputs"], "Outputs", false)
	for name := range params {
		if !used[name] {
			errs = append(errs, "Parameters."+name+" is not used")
		}
	}
	return errs
}

// cfnResolve is v as CloudFormation would deploy it with the parameter
// values given (others at their Default): Refs to parameters, Fn::If,
// Fn::Not, Fn::Equals and AWS::NoValue are resolved; other intrinsic
// functions stay.
func cfnResolve(tmpl map[string]any, values map[string]string, v any) any {
	params, _ := tmpl["Parameters"].(map[string]any)
	conds, _ := tmpl["Conditions"].(map[string]any)
	noValue := &struct{}{}
	var resolve func(v any) any
	var holds func(v any) bool
	holds = func(v any) bool {
		m, _ := v.(map[string]any)
		switch {
		case m["Fn::Not"] != nil:
			return !holds(m["Fn::Not"].([]any)[0])
		case m["Fn::Equals"] != nil:
			args := m["Fn::Equals"].([]any)
			return fmt.Sprint(resolve(args[0])) == fmt.Sprint(resolve(args[1]))
		case m["Condition"] != nil:
			return holds(conds[m["Condition"].(string)])
		}
		panic(fmt.Sprintf("condition %v", v))
	}
	resolve = func(v any) any {
		switch v := v.(type) {
		case []any:
			var out []any
			for _, x := range v {
				if r := resolve(x); r != noValue {
					out = append(out, r)
				}
			}
			return out
		case map[string]any:
			if ref, ok := v["Ref"].(string); ok && len(v) == 1 {
				if ref == "AWS::NoValue" {
					return noValue
				}
				if p, ok := params[ref].(map[string]any); ok {
					if val, ok := values[ref]; ok {
						return val
					}
					return p["Default"]
				}
				return v
			}
			if args, ok := v["Fn::If"].([]any); ok && len(v) == 1 {
				if holds(conds[args[0].(string)]) {
					return resolve(args[1])
				}
				return resolve(args[2])
			}
			out := map[string]any{}
			for k, x := range v {
				if r := resolve(x); r != noValue {
					out[k] = r
				}
			}
			return out
		}
		return v
	}
	return resolve(v)
}

func TestCloudFormationLoggingAndAlarm(t *testing.T) {
	existing := templateConfig
	existing.ExistingTable = true
	for _, c := range []Config{templateConfig, existing} {
		tmpl := cloudFormation(t, c)
		if errs := cfnTemplateCheck(tmpl); len(errs) > 0 {
			t.Errorf("existing table %v: %v", c.ExistingTable, errs)
		}
		res, _ := tmpl["Resources"].(map[string]any)
		typ := func(id, want string) map[string]any {
			t.Helper()
			if got := dig(res[id], "Type"); got != want {
				t.Errorf("%s is a %v, want a %s", id, got, want)
			}
			p, _ := dig(res[id], "Properties").(map[string]any)
			return p
		}
		same := func(what string, got any, want string) {
			t.Helper()
			if g := mustJSON(t, got); g != want {
				t.Errorf("%s: %s, want %s", what, g, want)
			}
		}

		// Parameters: only what a stack may change without writing the
		// machine again.
		params, _ := tmpl["Parameters"].(map[string]any)
		if got := slices.Sorted(maps.Keys(params)); !slices.Equal(got, []string{"AlarmTopicArn", "LogLevel", "LogRetentionDays"}) {
			t.Errorf("parameters %v", got)
		}
		same("LogLevel", map[string]any{"Type": dig(params, "LogLevel", "Type"), "Default": dig(params, "LogLevel", "Default"),
			"AllowedValues": dig(params, "LogLevel", "AllowedValues")}, `{"AllowedValues":["ALL","ERROR","FATAL","OFF"],"Default":"ERROR","Type":"String"}`)
		same("LogRetentionDays", map[string]any{"Type": dig(params, "LogRetentionDays", "Type"), "Default": dig(params, "LogRetentionDays", "Default"),
			"AllowedValues": dig(params, "LogRetentionDays", "AllowedValues")}, mustJSON(t, map[string]any{"Type": "Number", "Default": "30", "AllowedValues": retentionDays}))
		same("AlarmTopicArn default", dig(params, "AlarmTopicArn", "Default"), `""`)
		if pat, _ := dig(params, "AlarmTopicArn", "AllowedPattern").(string); pat != "" {
			re := regexp.MustCompile(pat)
			for topic, ok := range map[string]bool{"": true, "arn:aws:sns:eu-west-1:123456789012:alerts": true,
				"arn:aws-cn:sns:cn-north-1:123456789012:ops_alerts-1": true, "alerts": false, "arn:aws:sqs:eu-west-1:123456789012:q": false} {
				if re.MatchString(topic) != ok {
					t.Errorf("AlarmTopicArn's pattern: %q allowed %v", topic, !ok)
				}
			}
		}

		// The log group and the machine's logging.
		lg := typ("LockMachineLogGroup", "AWS::Logs::LogGroup")
		same("the log group's retention", lg["RetentionInDays"], `{"Ref":"LogRetentionDays"}`)
		if name, _ := lg["LogGroupName"].(string); !strings.HasPrefix(name, "/aws/vendedlogs/states/") {
			t.Errorf("log group %q: not under /aws/vendedlogs/ (the resource policy's size limit)", name)
		}
		same("the machine's logging", dig(res[CFNMachine], "Properties", "LoggingConfiguration"),
			`{"Destinations":[{"CloudWatchLogsLogGroup":{"LogGroupArn":{"Fn::GetAtt":["LockMachineLogGroup","Arn"]}}}],"IncludeExecutionData":false,"Level":{"Ref":"LogLevel"}}`)
		// cfn-lint's false E3601 on the JSONata TimeoutSeconds.
		same("the machine's Metadata", dig(res[CFNMachine], "Metadata"), `{"cfn-lint":{"config":{"ignore_checks":["E3601"]}}}`)

		// Metric filters and the alarm.
		metric := map[string]string{}
		for id, pattern := range map[string]string{"LeaseLostMetricFilter": leaseLostPattern, "LockNotAcquiredMetricFilter": lockNotAcquiredPattern} {
			p := typ(id, "AWS::Logs::MetricFilter")
			same(id+"'s log group", p["LogGroupName"], `{"Ref":"LockMachineLogGroup"}`)
			same(id+"'s pattern", p["FilterPattern"], mustJSON(t, pattern))
			mt, _ := p["MetricTransformations"].([]any)
			if len(mt) != 1 || dig(mt[0], "MetricValue") != "1" {
				t.Errorf("%s counts %v", id, mustJSON(t, mt))
				continue
			}
			metric[id] = mustJSON(t, []any{dig(mt[0], "MetricNamespace"), dig(mt[0], "MetricName")})
		}
		if metric["LeaseLostMetricFilter"] == metric["LockNotAcquiredMetricFilter"] {
			t.Errorf("both filters count into %s", metric["LeaseLostMetricFilter"])
		}
		alarm := typ("LeaseLostAlarm", "AWS::CloudWatch::Alarm")
		same("the alarm's metric", []any{alarm["Namespace"], alarm["MetricName"]}, metric["LeaseLostMetricFilter"])
		same("the alarm", map[string]any{"Statistic": alarm["Statistic"], "Period": alarm["Period"], "EvaluationPeriods": alarm["EvaluationPeriods"],
			"Threshold": alarm["Threshold"], "ComparisonOperator": alarm["ComparisonOperator"], "TreatMissingData": alarm["TreatMissingData"]},
			`{"ComparisonOperator":"GreaterThanOrEqualToThreshold","EvaluationPeriods":1,"Period":300,"Statistic":"Sum","Threshold":1,"TreatMissingData":"notBreaching"}`)
		if d, _ := alarm["AlarmDescription"].(string); len(d) > 1024 {
			t.Errorf("the alarm's description has %d bytes (CloudWatch: at most 1024)", len(d))
		}
		// Deployed: no actions without a topic; the topic with one.
		topic := "arn:aws:sns:eu-west-1:123456789012:alerts"
		for _, tc := range []struct {
			values map[string]string
			want   string
		}{{nil, `null`}, {map[string]string{"AlarmTopicArn": topic}, `["` + topic + `"]`}} {
			got := cfnResolve(tmpl, tc.values, alarm).(map[string]any)
			if _, ok := got["AlarmActions"]; ok != (tc.want != `null`) {
				t.Errorf("the alarm with %v has AlarmActions %v", tc.values, ok)
			}
			same(fmt.Sprintf("the alarm's actions with %v", tc.values), got["AlarmActions"], tc.want)
		}
		for values, want := range map[string]string{"": "ERROR", "OFF": "OFF"} {
			v := map[string]string{}
			if values != "" {
				v["LogLevel"] = values
			}
			same("the deployed log level", dig(cfnResolve(tmpl, v, res[CFNMachine]), "Properties", "LoggingConfiguration", "Level"), mustJSON(t, want))
		}

		// Outputs.
		same("outputs", map[string]any{"LogGroupName": dig(tmpl, "Outputs", "LogGroupName", "Value"), "LeaseLostAlarmName": dig(tmpl, "Outputs", "LeaseLostAlarmName", "Value")},
			`{"LeaseLostAlarmName":{"Ref":"LeaseLostAlarm"},"LogGroupName":{"Ref":"LockMachineLogGroup"}}`)
	}
	if t.Failed() {
		return
	}
	// The checks of the Parameters and Conditions can fail.
	for name, mutate := range map[string]func(tmpl map[string]any){
		"unknown condition": func(tmpl map[string]any) { delete(tmpl["Conditions"].(map[string]any), "HasAlarmTopic") },
		"default not allowed": func(tmpl map[string]any) {
			dig(tmpl, "Parameters", "LogRetentionDays").(map[string]any)["Default"] = "31"
		},
		"unused parameter": func(tmpl map[string]any) {
			dig(tmpl, "Resources", "LockMachineLogGroup", "Properties").(map[string]any)["RetentionInDays"] = 30
		},
		"condition on a resource": func(tmpl map[string]any) {
			tmpl["Conditions"].(map[string]any)["HasAlarmTopic"] = map[string]any{"Fn::Equals": []any{map[string]any{"Ref": CFNMachine}, ""}}
		},
	} {
		tmpl := cloudFormation(t, templateConfig)
		mutate(tmpl)
		if len(cfnTemplateCheck(tmpl)) == 0 {
			t.Errorf("%s: the check accepts the broken template", name)
		}
	}
	// The docs describe the same alarm and the cfn-lint Metadata.
	doc, err := os.ReadFile("../docs/step-functions.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{leaseLostPattern, lockNotAcquiredPattern, `"ignore_checks": ["E3601"]`, "LogLevel", "LogRetentionDays", "AlarmTopicArn",
		"log_level", "log_retention_days", "alarm_topic_arn", "LogGroupName", "LeaseLostAlarmName"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/step-functions.md does not say %s", want)
		}
	}
}

// longConfigs have the longest valid lock (256 bytes, with characters that
// %q escapes, some of them multi-byte, and multi-byte ones it keeps), the
// longest valid table name and long Lambda ARNs: realistic (the longest
// function name and alias) and absurd (the ARN check has no length limit).
func longConfigs(t *testing.T) []Config {
	t.Helper()
	// %q escapes " \ U+00A0 and U+00AD (those two: 2 bytes → 6) and keeps
	// é and 中; "${" is for Terraform. All no-break spaces is the worst
	// case: 256 bytes quoted in 770.
	unit := "\u00a0\u00ad\u00a0\"\\é中${"
	table := strings.Repeat("t", 250) + "._-X9"
	realistic := "arn:aws-us-gov:lambda:us-gov-west-1:123456789012:function:" + strings.Repeat("f", 64) + ":" + strings.Repeat("q", 127) + "$"
	absurd := "arn:aws:lambda:eu-west-1:123456789012:function:" + strings.Repeat("g", 2000)
	var cs []Config
	for shift := range len(unit) + 3 {
		lock := strings.Repeat("a", shift) + strings.Repeat(unit, 30)
		if shift == len(unit)+2 {
			lock = strings.Repeat("\u00a0", 128)
		}
		lock = strings.ToValidUTF8(lock[:256], "")
		lock += strings.Repeat("b", 256-len(lock))
		c := templateConfig
		c.Lock, c.Table, c.LambdaARN = lock, table, realistic
		if shift%2 == 1 && shift != len(unit)+2 {
			c.LambdaARN = absurd
		}
		if shift == 3 {
			c.Name = strings.Repeat("N", 70)
		}
		if err := (&c).Validate(); err != nil {
			t.Fatalf("not a valid config: %v", err)
		}
		cs = append(cs, c)
	}
	return cs
}

func TestTemplateDescriptionsFit(t *testing.T) {
	// Short inputs are not shortened.
	tmpl := cloudFormation(t, templateConfig)
	if want := `leasehold: runs arn:aws:lambda:eu-west-1:123456789012:function:import under the lock "nightly-import" (DynamoDB table leasehold), with cleanup of dead executions.`; tmpl["Description"] != want {
		t.Errorf("description %q, want %q", tmpl["Description"], want)
	}
	quoted := regexp.MustCompile(`under the lock ("(?:[^"\\]|\\.)*")`)
	fits := func(what, s string, limit int) {
		t.Helper()
		if len(s) > limit || !utf8.ValidString(s) {
			t.Errorf("%s: %d bytes (at most %d), valid UTF-8 %v: %q", what, len(s), limit, utf8.ValidString(s), s)
		}
	}
	for i, c := range longConfigs(t) {
		what := fmt.Sprintf("config %d", i)
		tmpl := cloudFormation(t, c)
		desc, _ := tmpl["Description"].(string)
		fits(what+": the template's Description", desc, 1024)
		// The lock is shortened whole characters at a time, escapes and
		// all: what is shown is still a quoted string, of the lock's start.
		if m := quoted.FindStringSubmatch(desc); m == nil {
			t.Errorf("%s: no quoted lock in %q", what, desc)
		} else if u, err := strconv.Unquote(m[1]); err != nil {
			t.Errorf("%s: the lock is cut inside an escape: %s", what, m[1])
		} else if u != c.Lock && !(strings.HasSuffix(u, "…") && strings.HasPrefix(c.Lock, strings.TrimSuffix(u, "…"))) {
			t.Errorf("%s: the description shows the lock as %q", what, u)
		}
		if !strings.HasPrefix(desc, "leasehold: runs arn:aws") || !strings.Contains(desc, "(DynamoDB table tttt") {
			t.Errorf("%s: description %q", what, desc)
		}
		res := tmpl["Resources"].(map[string]any)
		rule, _ := dig(res[CFNCleanupRule], "Properties", "Description").(string)
		fits(what+": the rule's Description", rule, 512)
		if alarm, ok := dig(res["LeaseLostAlarm"], "Properties", "AlarmDescription").(string); ok {
			fits(what+": the alarm's description", alarm, 1024)
		}
		if i == 0 {
			if errs := cfnCheck(t, tmpl); len(errs) > 0 {
				t.Errorf("%s: %v", what, errs)
			}
		}
		b, err := Terraform(c)
		if err != nil {
			t.Fatal(err)
		}
		var conf map[string]any
		if err := json.Unmarshal(b, &conf); err != nil {
			t.Fatal(err)
		}
		if errs := tfCheck(conf); len(errs) > 0 {
			t.Errorf("%s: %v", what, errs)
		}
		// What Terraform sends, once it has read "$${" as "${".
		unescape := strings.NewReplacer("$${", "${", "%%{", "%{").Replace
		rule, _ = dig(conf, "resource", "aws_cloudwatch_event_rule", "cleanup", "description").(string)
		fits(what+": the Terraform rule's description", unescape(rule), 512)
		if alarm, ok := dig(conf, "resource", "aws_cloudwatch_metric_alarm", "lease_lost", "alarm_description").(string); ok {
			fits(what+": the Terraform alarm's description", unescape(alarm), 1024)
		}
	}
}

func TestTerraformLoggingAndAlarm(t *testing.T) {
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
		unescape := strings.NewReplacer("$${", "${", "%%{", "%{").Replace
		same := func(what string, got any, want string) {
			t.Helper()
			if g := mustJSON(t, got); g != want {
				t.Errorf("lock %q: %s: %s, want %s", c.Lock, what, g, want)
			}
		}
		// The variables, as CloudFormation's parameters.
		vars, _ := conf["variable"].(map[string]any)
		if got := slices.Sorted(maps.Keys(vars)); !slices.Equal(got, []string{"alarm_topic_arn", "log_level", "log_retention_days"}) {
			t.Errorf("variables %v", got)
		}
		same("log_level", []any{dig(vars, "log_level", "type"), dig(vars, "log_level", "default")}, `["string","ERROR"]`)
		same("log_retention_days", []any{dig(vars, "log_retention_days", "type"), dig(vars, "log_retention_days", "default")}, `["number",30]`)
		same("alarm_topic_arn", []any{dig(vars, "alarm_topic_arn", "type"), dig(vars, "alarm_topic_arn", "default")}, `["string",""]`)
		for v, allowed := range map[string][]string{"log_level": {`"ALL"`, `"ERROR"`, `"FATAL"`, `"OFF"`}, "log_retention_days": retentionDays} {
			cond := mustJSON(t, dig(vars, v, "validation"))
			for _, a := range allowed {
				if !strings.Contains(cond, strings.ReplaceAll(a, `"`, `\"`)) {
					t.Errorf("%s's validation does not allow %s: %s", v, a, cond)
				}
			}
		}
		res, _ := conf["resource"].(map[string]any)
		lg, _ := dig(res, "aws_cloudwatch_log_group", "lock").(map[string]any)
		if name, _ := lg["name"].(string); !strings.HasPrefix(name, "/aws/vendedlogs/states/") {
			t.Errorf("log group %q", name)
		}
		same("the log group's retention", lg["retention_in_days"], `"${var.log_retention_days}"`)
		same("the machine's logging", dig(res, "aws_sfn_state_machine", "lock", "logging_configuration"),
			`{"include_execution_data":false,"level":"${var.log_level}","log_destination":"${aws_cloudwatch_log_group.lock.arn}:*"}`)
		// The role may log.
		var doc struct{ Statement []map[string]any }
		policy, _ := dig(res, "aws_iam_role_policy", "machine", "policy").(string)
		if err := json.Unmarshal([]byte(unescape(policy)), &doc); err != nil {
			t.Fatal(err)
		}
		var logs []string
		for _, s := range doc.Statement {
			for _, a := range s["Action"].([]any) {
				if strings.HasPrefix(a.(string), "logs:") {
					logs = append(logs, a.(string)+" "+mustJSON(t, s["Resource"]))
				}
			}
		}
		if !slices.Equal(logs, logDeliveryWant) {
			t.Errorf("the machine's role may %v, want %v", logs, logDeliveryWant)
		}
		metric := map[string]string{}
		for id, pattern := range map[string]string{"lease_lost": leaseLostPattern, "lock_not_acquired": lockNotAcquiredPattern} {
			f, _ := dig(res, "aws_cloudwatch_log_metric_filter", id).(map[string]any)
			same(id+"'s log group", f["log_group_name"], `"${aws_cloudwatch_log_group.lock.name}"`)
			p, _ := f["pattern"].(string)
			same(id+"'s pattern", unescape(p), mustJSON(t, pattern))
			same(id+"'s value", dig(f, "metric_transformation", "value"), `"1"`)
			metric[id] = mustJSON(t, []any{dig(f, "metric_transformation", "namespace"), dig(f, "metric_transformation", "name")})
		}
		alarm, _ := dig(res, "aws_cloudwatch_metric_alarm", "lease_lost").(map[string]any)
		same("the alarm's metric", []any{alarm["namespace"], alarm["metric_name"]}, metric["lease_lost"])
		same("the alarm", map[string]any{"statistic": alarm["statistic"], "period": alarm["period"], "evaluation_periods": alarm["evaluation_periods"],
			"threshold": alarm["threshold"], "comparison_operator": alarm["comparison_operator"], "treat_missing_data": alarm["treat_missing_data"]},
			`{"comparison_operator":"GreaterThanOrEqualToThreshold","evaluation_periods":1,"period":300,"statistic":"Sum","threshold":1,"treat_missing_data":"notBreaching"}`)
		// compact drops the empty string: no actions without a topic.
		same("the alarm's actions", alarm["alarm_actions"], `"${compact([var.alarm_topic_arn])}"`)
		same("outputs", []any{dig(conf, "output", "log_group_name", "value"), dig(conf, "output", "lease_lost_alarm_name", "value")},
			`["${aws_cloudwatch_log_group.lock.name}","${aws_cloudwatch_metric_alarm.lease_lost.alarm_name}"]`)
	}
	// The new parts of the check can fail.
	for _, broken := range []string{
		`{"resource": {"aws_iam_role": {"r": {"assume_role_policy": "${var.nope}"}}}}`,
		`{"resource": {"aws_iam_role": {"r": {"assume_role_policy": "${jsonencode(1)}"}}}}`,
		`{"variable": {"x": {"type": "string"}}, "resource": {"aws_iam_role": {"r": {"assume_role_policy": "{}"}}}}`,
		`{"variable": {"x": {"type": "number", "default": "30"}}, "resource": {"aws_iam_role": {"r": {"assume_role_policy": "${var.x}"}}}}`,
		`{"variable": {"x": {"type": "string", "validation": [{"condition": "${var.x == \"\"}"}]}}, "resource": {"aws_iam_role": {"r": {"assume_role_policy": "${var.x}"}}}}`,
		`{"resource": {"aws_sfn_state_machine": {"m": {"name": "x", "definition": "{}", "role_arn": "r", "logging_configuration": {"destination": "d"}}}}}`,
		`{"resource": {"aws_cloudwatch_log_metric_filter": {"f": {"name": "n", "pattern": "p", "log_group_name": "g", "metric_transformation": {"name": "m", "value": "1"}}}}}`,
		`{"resource": {"aws_cloudwatch_metric_alarm": {"a": {"alarm_name": "n", "comparison_operator": "c", "evaluation_periods": 1, "treat_missing": "x"}}}}`,
		`{"resource": {"aws_iam_role": {"r": {"assume_role_policy": "${can(regex(\"}\", \"x\")"}}}}`,
	} {
		var conf map[string]any
		if err := json.Unmarshal([]byte(broken), &conf); err != nil {
			t.Fatal(err)
		}
		if len(tfCheck(conf)) == 0 {
			t.Errorf("the check accepts %s", broken)
		}
	}
}
