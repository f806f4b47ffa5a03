package sfn

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Logical ids of the CloudFormation template's resources, parameters and
// conditions.
const (
	CFNTable           = "LockTable"
	CFNMachine         = "LockMachine"
	CFNMachineRole     = "LockMachineRole"
	CFNCleanup         = "CleanupMachine"
	CFNCleanupRole     = "CleanupMachineRole"
	CFNCleanupRule     = "CleanupRule"
	CFNCleanupRuleRole = "CleanupRuleRole"
	// CFNLogGroup is the lock machine's log group; CFNLeaseLostFilter and
	// CFNLockNotAcquiredFilter count its Leasehold.LeaseLost and
	// Leasehold.LockNotAcquired failures, and CFNLeaseLostAlarm alarms on
	// the first.
	CFNLogGroup              = "LockMachineLogGroup"
	CFNLeaseLostFilter       = "LeaseLostMetricFilter"
	CFNLockNotAcquiredFilter = "LockNotAcquiredMetricFilter"
	CFNLeaseLostAlarm        = "LeaseLostAlarm"

	// Parameters: what may change per stack without writing the machine
	// again.
	CFNParamLogLevel     = "LogLevel"
	CFNParamLogRetention = "LogRetentionDays"
	CFNParamAlarmTopic   = "AlarmTopicArn"
	// CFNCondAlarmTopic holds when CFNParamAlarmTopic is not empty.
	CFNCondAlarmTopic = "HasAlarmTopic"
)

// Logging and alarms of the lock machine, shared by both templates.
const (
	// defaultLogLevel is the machine's default log level: ERROR logs the
	// ExecutionFailed events the alarm counts (so does FATAL; OFF logs
	// nothing, and the alarm then never fires).
	defaultLogLevel = "ERROR"
	// defaultLogRetentionDays is how long the log group keeps events by
	// default.
	defaultLogRetentionDays = 30
	// metricNamespace is the CloudWatch namespace of the metric filters.
	metricNamespace = "Leasehold"
)

// logLevels are Step Functions' log levels (LoggingConfiguration.Level).
var logLevels = []string{"ALL", "ERROR", "FATAL", "OFF"}

// logRetentionDays are the retention periods CloudWatch Logs accepts
// (PutRetentionPolicy's retentionInDays).
var logRetentionDays = []int{1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}

// logDeliveryActions are the permissions Step Functions needs in the
// machine's role to log to CloudWatch Logs, on "*" (these actions do not
// take a resource): AWS Step Functions Developer Guide, "Using CloudWatch
// Logs to log execution history in Step Functions", section "IAM Policies
// for logging to CloudWatch Logs"
// (https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html#cloudwatch-iam-policy).
var logDeliveryActions = []any{
	"logs:CreateLogDelivery",
	"logs:GetLogDelivery",
	"logs:UpdateLogDelivery",
	"logs:DeleteLogDelivery",
	"logs:ListLogDeliveries",
	"logs:PutResourcePolicy",
	"logs:DescribeResourcePolicies",
	"logs:DescribeLogGroups",
}

// failurePattern is the CloudWatch Logs filter pattern that matches the
// log event of an execution that failed with the error errName
// (docs/step-functions.md, "Alarms on Leasehold.LeaseLost").
func failurePattern(errName string) string {
	return fmt.Sprintf(`{ $.type = "ExecutionFailed" && $.details.error = %s }`, strconv.Quote(errName))
}

// logGroupName is the lock machine's log group. Under /aws/vendedlogs/ so
// that Step Functions need not add it to the account's CloudWatch Logs
// resource policy, which is limited to 5,120 characters (AWS Step
// Functions Developer Guide, "Amazon CloudWatch Logs resource policy size
// restrictions").
func (c *Config) logGroupName() string { return "/aws/vendedlogs/states/" + c.name() }

// metricName is the name of the metric (in metricNamespace) counting the
// machine's executions that failed with errName ("Leasehold.LeaseLost" →
// "NAME-LeaseLost").
func (c *Config) metricName(errName string) string {
	return c.name() + "-" + strings.TrimPrefix(errName, "Leasehold.")
}

// leaseLostAlarmName is the name of the alarm on Leasehold.LeaseLost.
func (c *Config) leaseLostAlarmName() string { return c.metricName(ErrLeaseLost) }

func (c *Config) leaseLostAlarmDescription() string {
	return fmt.Sprintf("An execution of %s failed with %s: another client was granted the lock before it released it, so its task may have overlapped with another holder's (docs/step-functions.md).", c.name(), ErrLeaseLost)
}

// Length limits of descriptions, counted here in bytes (CloudFormation
// counts a template's Description in bytes, EventBridge a rule's in
// characters, which are never more).
const (
	maxTemplateDescription = 1024
	maxRuleDescription     = 512
)

// ellipsis marks where clip and quoteClip cut.
const ellipsis = "…"

// clip is s in at most limit bytes: cut at a character boundary and ended
// with an ellipsis when it is longer.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	n := max(limit-len(ellipsis), 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// quoteClip is s quoted as by %q in at most limit bytes (limit ≥ 5): when the
// quoted string is longer, it keeps the whole characters (each with its
// escape) that fit before an ellipsis inside the quotes, so the result is
// still a quoted string.
func quoteClip(s string, limit int) string {
	if q := strconv.Quote(s); len(q) <= limit {
		return q
	}
	var b strings.Builder
	n := len(`"` + ellipsis + `"`)
	for _, r := range s {
		e := strconv.Quote(string(r))
		e = e[1 : len(e)-1]
		if n+len(e) > limit {
			break
		}
		n += len(e)
		b.WriteString(e)
	}
	return `"` + b.String() + ellipsis + `"`
}

// templateDescription is the CloudFormation template's Description,
// within its 1,024 bytes whatever the inputs: the ARN, the lock and the
// table are each shortened (an ellipsis marks the cut) so that together
// they fit.
func (c *Config) templateDescription() string {
	return clip(fmt.Sprintf("leasehold: runs %s under the lock %s (DynamoDB table %s), with cleanup of dead executions.",
		clip(c.LambdaARN, 256), quoteClip(c.Lock, 300), clip(c.Table, 255)), maxTemplateDescription)
}

// ruleDescription is the EventBridge rule's Description, within its 512
// characters.
func (c *Config) ruleDescription() string {
	return clip(fmt.Sprintf("Starts the leasehold cleanup machine when an execution of %s ends FAILED, TIMED_OUT or ABORTED.", c.name()), maxRuleDescription)
}

// name is the machine's name in templates.
func (c *Config) name() string {
	if c.Name != "" {
		return c.Name
	}
	var b strings.Builder
	b.WriteString("leasehold-")
	for _, r := range c.Lock {
		if b.Len() >= 70 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return b.String()
}

// policyDoc is an IAM policy document.
func policyDoc(statements ...obj) obj {
	list := make([]any, len(statements))
	for i, s := range statements {
		list[i] = s
	}
	return obj{"Version": "2012-10-17", "Statement": list}
}

func trust(service string) obj {
	return policyDoc(obj{"Effect": "Allow", "Principal": obj{"Service": service}, "Action": "sts:AssumeRole"})
}

// tableActions are the DynamoDB actions the machines use.
var tableActions = []any{"dynamodb:UpdateItem"}

// cfnLintIgnore is the lock machine's resource Metadata that makes
// cfn-lint (1.x) skip E3601, its check of the definition's structure: it
// wants a number for the Task state's TimeoutSeconds, which here is a
// JSONata expression ("{% ... %}", the redrive check), as Step Functions
// allows in JSONata mode.
func cfnLintIgnore() obj {
	return obj{"cfn-lint": obj{"config": obj{"ignore_checks": []any{"E3601"}}}}
}

// CloudFormation returns a CloudFormation template (JSON; SAM deploys it
// as it is) with the lock machine and its role, the DynamoDB table in the
// store's key schema (kept when the stack is deleted: it holds the fencing
// counters) unless ExistingTable, the cleanup machine and its role, the
// EventBridge rule (with its role) that starts the cleanup machine, the
// lock machine's log group, metric filters on its Leasehold.LeaseLost and
// Leasehold.LockNotAcquired failures and an alarm on the first. The roles
// allow exactly dynamodb:UpdateItem on the table, lambda:InvokeFunction on
// the function, the log delivery actions Step Functions needs for logging
// (on "*"), and states:StartExecution on the cleanup machine. Its
// parameters are the log level (LogLevel), the log retention
// (LogRetentionDays) and the SNS topic the alarm notifies (AlarmTopicArn,
// none by default); what is compiled into the machine is not a parameter.
// It needs LambdaARN: a Task state's permissions cannot be known here.
func CloudFormation(c Config) ([]byte, error) {
	machine, cleanup, err := c.templateMachines()
	if err != nil {
		return nil, err
	}
	var tableArn any
	resources := obj{}
	if c.ExistingTable {
		tableArn = obj{"Fn::Sub": "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/" + c.Table}
	} else {
		tableArn = obj{"Fn::GetAtt": []any{CFNTable, "Arn"}}
		resources[CFNTable] = obj{
			"Type":                "AWS::DynamoDB::Table",
			"DeletionPolicy":      "Retain",
			"UpdateReplacePolicy": "Retain",
			"Properties": obj{
				"TableName":            c.Table,
				"BillingMode":          "PAY_PER_REQUEST",
				"AttributeDefinitions": []any{obj{"AttributeName": "LockKey", "AttributeType": "S"}},
				"KeySchema":            []any{obj{"AttributeName": "LockKey", "KeyType": "HASH"}},
			},
		}
	}
	// role is an IAM role the service assumes, with one inline policy.
	role := func(service, policy string, statements ...obj) obj {
		return obj{
			"Type": "AWS::IAM::Role",
			"Properties": obj{
				"AssumeRolePolicyDocument": trust(service),
				"Policies":                 []any{obj{"PolicyName": policy, "PolicyDocument": policyDoc(statements...)}},
			},
		}
	}
	stateMachine := func(name, role string, definition any) obj {
		return obj{
			"Type": "AWS::StepFunctions::StateMachine",
			"Properties": obj{
				"StateMachineName": name,
				"StateMachineType": "STANDARD",
				"RoleArn":          obj{"Fn::GetAtt": []any{role, "Arn"}},
				"Definition":       definition,
			},
		}
	}
	resources[CFNMachineRole] = role("states.amazonaws.com", "leasehold-lock",
		obj{"Effect": "Allow", "Action": tableActions, "Resource": tableArn},
		obj{"Effect": "Allow", "Action": []any{"lambda:InvokeFunction"}, "Resource": c.LambdaARN},
		obj{"Effect": "Allow", "Action": logDeliveryActions, "Resource": "*"})
	lock := stateMachine(c.name(), CFNMachineRole, machine)
	lock["Properties"].(obj)["LoggingConfiguration"] = obj{
		"Level":                obj{"Ref": CFNParamLogLevel},
		"IncludeExecutionData": false,
		"Destinations": []any{obj{"CloudWatchLogsLogGroup": obj{
			// The log group's Arn ends in ":*", as Step Functions wants.
			"LogGroupArn": obj{"Fn::GetAtt": []any{CFNLogGroup, "Arn"}},
		}}},
	}
	lock["Metadata"] = cfnLintIgnore()
	resources[CFNMachine] = lock
	resources[CFNLogGroup] = obj{
		"Type": "AWS::Logs::LogGroup",
		// Deleted with the stack: its name is fixed, so a log group left
		// behind would stop the stack from being created again.
		"DeletionPolicy":      "Delete",
		"UpdateReplacePolicy": "Delete",
		"Properties": obj{
			"LogGroupName":    c.logGroupName(),
			"RetentionInDays": obj{"Ref": CFNParamLogRetention},
		},
	}
	metricFilter := func(errName string) obj {
		return obj{
			"Type": "AWS::Logs::MetricFilter",
			"Properties": obj{
				"LogGroupName":  obj{"Ref": CFNLogGroup},
				"FilterPattern": failurePattern(errName),
				"MetricTransformations": []any{obj{
					"MetricNamespace": metricNamespace,
					"MetricName":      c.metricName(errName),
					"MetricValue":     "1",
				}},
			},
		}
	}
	resources[CFNLeaseLostFilter] = metricFilter(ErrLeaseLost)
	resources[CFNLockNotAcquiredFilter] = metricFilter(ErrLockNotAcquired)
	resources[CFNLeaseLostAlarm] = obj{
		"Type": "AWS::CloudWatch::Alarm",
		"Properties": obj{
			"AlarmName":          c.leaseLostAlarmName(),
			"AlarmDescription":   c.leaseLostAlarmDescription(),
			"Namespace":          metricNamespace,
			"MetricName":         c.metricName(ErrLeaseLost),
			"Statistic":          "Sum",
			"Period":             300,
			"EvaluationPeriods":  1,
			"Threshold":          1,
			"ComparisonOperator": "GreaterThanOrEqualToThreshold",
			"TreatMissingData":   "notBreaching",
			"AlarmActions": obj{"Fn::If": []any{CFNCondAlarmTopic,
				[]any{obj{"Ref": CFNParamAlarmTopic}}, obj{"Ref": "AWS::NoValue"}}},
		},
	}
	resources[CFNCleanupRole] = role("states.amazonaws.com", "leasehold-cleanup",
		obj{"Effect": "Allow", "Action": tableActions, "Resource": tableArn})
	resources[CFNCleanup] = stateMachine(c.name()+"-cleanup", CFNCleanupRole, cleanup)
	resources[CFNCleanupRuleRole] = role("events.amazonaws.com", "leasehold-start-cleanup",
		obj{"Effect": "Allow", "Action": []any{"states:StartExecution"}, "Resource": obj{"Ref": CFNCleanup}})
	resources[CFNCleanupRule] = obj{
		"Type": "AWS::Events::Rule",
		"Properties": obj{
			"Description":  c.ruleDescription(),
			"State":        "ENABLED",
			"EventPattern": EventPattern(obj{"Ref": CFNMachine}),
			"Targets": []any{obj{
				"Id":      "leasehold-cleanup",
				"Arn":     obj{"Ref": CFNCleanup},
				"RoleArn": obj{"Fn::GetAtt": []any{CFNCleanupRuleRole, "Arn"}},
			}},
		},
	}
	retention := make([]any, len(logRetentionDays))
	for i, d := range logRetentionDays {
		retention[i] = strconv.Itoa(d)
	}
	tmpl := obj{
		"AWSTemplateFormatVersion": "2010-09-09",
		"Description":              c.templateDescription(),
		"Parameters": obj{
			CFNParamLogLevel: obj{
				"Type":          "String",
				"Default":       defaultLogLevel,
				"AllowedValues": toAny(logLevels),
				"Description":   "Log level of the lock machine's logging to its log group. ERROR and FATAL log the failed executions that the LeaseLost alarm counts; OFF logs nothing (and the alarm never fires).",
			},
			CFNParamLogRetention: obj{
				"Type":          "Number",
				"Default":       strconv.Itoa(defaultLogRetentionDays),
				"AllowedValues": retention,
				"Description":   "Days the lock machine's log group keeps its events.",
			},
			CFNParamAlarmTopic: obj{
				"Type":                  "String",
				"Default":               "",
				"AllowedPattern":        alarmTopicPattern,
				"ConstraintDescription": "an SNS topic ARN, or empty",
				"Description":           "ARN of an SNS topic the LeaseLost alarm notifies; empty: the alarm has no actions.",
			},
		},
		"Conditions": obj{
			CFNCondAlarmTopic: obj{"Fn::Not": []any{obj{"Fn::Equals": []any{obj{"Ref": CFNParamAlarmTopic}, ""}}}},
		},
		"Resources": resources,
		"Outputs": obj{
			"StateMachineArn":        obj{"Value": obj{"Ref": CFNMachine}},
			"CleanupStateMachineArn": obj{"Value": obj{"Ref": CFNCleanup}},
			"LogGroupName":           obj{"Value": obj{"Ref": CFNLogGroup}},
			"LeaseLostAlarmName":     obj{"Value": obj{"Ref": CFNLeaseLostAlarm}},
		},
	}
	return json.MarshalIndent(tmpl, "", "  ")
}

// alarmTopicPattern is what an alarm topic may be: empty or an SNS topic
// ARN.
const alarmTopicPattern = `^$|^arn:aws[a-zA-Z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_.-]+$`

// tfTemplate matches what Terraform reads as a template sequence in a
// string of a JSON configuration.
var tfTemplate = regexp.MustCompile(`[$%]\{`)

// tfLiteral escapes s so that Terraform reads it as it is ("${" → "$${",
// "%{" → "%%{").
func tfLiteral(s string) string {
	return tfTemplate.ReplaceAllStringFunc(s, func(m string) string { return m[:1] + m })
}

// tfJSON is v as JSON text, escaped for Terraform.
func tfJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return tfLiteral(string(b)), nil
}

// tfString is s as a Terraform string literal inside an expression.
func tfString(s string) string {
	b, _ := json.Marshal(s)
	return tfLiteral(string(b))
}

// tfList is a Terraform tuple of the strings (quoted) or numbers.
func tfList[T string | int](xs []T) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		switch x := any(x).(type) {
		case string:
			parts[i] = tfString(x)
		case int:
			parts[i] = strconv.Itoa(x)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Terraform returns the resources of CloudFormation as a Terraform JSON
// configuration (a file named *.tf.json), for the hashicorp/aws provider:
// aws_dynamodb_table (with prevent_destroy; a data source when
// ExistingTable), aws_iam_role and aws_iam_role_policy for each role,
// aws_sfn_state_machine for both machines (the lock machine with its
// logging_configuration), aws_cloudwatch_event_rule and
// aws_cloudwatch_event_target, aws_cloudwatch_log_group,
// aws_cloudwatch_log_metric_filter for Leasehold.LeaseLost and
// Leasehold.LockNotAcquired, and aws_cloudwatch_metric_alarm on the first.
// CloudFormation's parameters are the variables log_level,
// log_retention_days and alarm_topic_arn.
func Terraform(c Config) ([]byte, error) {
	machine, cleanup, err := c.templateMachines()
	if err != nil {
		return nil, err
	}
	name := c.name()
	tableArn := "${aws_dynamodb_table.lock.arn}"
	resources := map[string]obj{}
	add := func(typ, id string, body obj) {
		if resources[typ] == nil {
			resources[typ] = obj{}
		}
		resources[typ][id] = body
	}
	conf := obj{
		"terraform": obj{"required_providers": obj{"aws": obj{"source": "hashicorp/aws"}}},
		"variable": obj{
			"log_level": obj{
				"type":        "string",
				"default":     defaultLogLevel,
				"description": "Log level of the lock machine's logging to its log group. ERROR and FATAL log the failed executions that the lease_lost alarm counts; OFF logs nothing (and the alarm never fires).",
				"validation": []any{obj{
					"condition":     "${contains(" + tfList(logLevels) + ", var.log_level)}",
					"error_message": "The log level must be one of " + strings.Join(logLevels, ", ") + ".",
				}},
			},
			"log_retention_days": obj{
				"type":        "number",
				"default":     defaultLogRetentionDays,
				"description": "Days the lock machine's log group keeps its events.",
				"validation": []any{obj{
					"condition":     "${contains(" + tfList(logRetentionDays) + ", var.log_retention_days)}",
					"error_message": "The log retention must be one of CloudWatch Logs' retention periods (1, 3, 5, 7, 14, 30, 60, 90, ... 3653 days).",
				}},
			},
			"alarm_topic_arn": obj{
				"type":        "string",
				"default":     "",
				"description": "ARN of an SNS topic the lease_lost alarm notifies; empty: the alarm has no actions.",
				"validation": []any{obj{
					"condition":     "${can(regex(" + tfString(alarmTopicPattern) + ", var.alarm_topic_arn))}",
					"error_message": "The alarm topic must be an SNS topic ARN, or empty.",
				}},
			},
		},
	}
	if c.ExistingTable {
		tableArn = "${data.aws_dynamodb_table.lock.arn}"
		conf["data"] = obj{"aws_dynamodb_table": obj{"lock": obj{"name": c.Table}}}
	} else {
		add("aws_dynamodb_table", "lock", obj{
			"name":         c.Table,
			"billing_mode": "PAY_PER_REQUEST",
			"hash_key":     "LockKey",
			"attribute":    []any{obj{"name": "LockKey", "type": "S"}},
			"lifecycle":    obj{"prevent_destroy": true},
		})
	}
	jsonField := func(v any) string {
		s, _ := tfJSON(v)
		return s
	}
	policy := func(statements ...obj) string {
		// The references inside are Terraform's: written after escaping.
		s := jsonField(policyDoc(statements...))
		return strings.ReplaceAll(s, "#TABLE_ARN#", tableArn)
	}
	// role adds the role id, which service assumes, with one inline policy.
	role := func(id, namePrefix, service, policyName, policy string) {
		add("aws_iam_role", id, obj{"name_prefix": namePrefix, "assume_role_policy": jsonField(trust(service))})
		add("aws_iam_role_policy", id, obj{"name": policyName, "role": "${aws_iam_role." + id + ".id}", "policy": policy})
	}
	stateMachine := func(id, roleID, name string, definition obj) obj {
		m := obj{
			"name": name, "type": "STANDARD",
			"role_arn":   "${aws_iam_role." + roleID + ".arn}",
			"definition": jsonField(definition),
		}
		add("aws_sfn_state_machine", id, m)
		return m
	}
	role("machine", "leasehold-lock-", "states.amazonaws.com", "leasehold-lock", policy(
		obj{"Effect": "Allow", "Action": tableActions, "Resource": "#TABLE_ARN#"},
		obj{"Effect": "Allow", "Action": []any{"lambda:InvokeFunction"}, "Resource": c.LambdaARN},
		obj{"Effect": "Allow", "Action": logDeliveryActions, "Resource": "*"}))
	lock := stateMachine("lock", "machine", name, machine)
	lock["logging_configuration"] = obj{
		// The provider's arn has no ":*"; Step Functions wants it.
		"log_destination":        "${aws_cloudwatch_log_group.lock.arn}:*",
		"include_execution_data": false,
		"level":                  "${var.log_level}",
	}
	add("aws_cloudwatch_log_group", "lock", obj{
		"name":              c.logGroupName(),
		"retention_in_days": "${var.log_retention_days}",
	})
	metricFilter := func(id, errName string) {
		add("aws_cloudwatch_log_metric_filter", id, obj{
			"name":           c.metricName(errName),
			"log_group_name": "${aws_cloudwatch_log_group.lock.name}",
			"pattern":        tfLiteral(failurePattern(errName)),
			"metric_transformation": obj{
				"namespace": metricNamespace,
				"name":      c.metricName(errName),
				"value":     "1",
			},
		})
	}
	metricFilter("lease_lost", ErrLeaseLost)
	metricFilter("lock_not_acquired", ErrLockNotAcquired)
	add("aws_cloudwatch_metric_alarm", "lease_lost", obj{
		"alarm_name":          c.leaseLostAlarmName(),
		"alarm_description":   tfLiteral(c.leaseLostAlarmDescription()),
		"namespace":           metricNamespace,
		"metric_name":         c.metricName(ErrLeaseLost),
		"statistic":           "Sum",
		"period":              300,
		"evaluation_periods":  1,
		"threshold":           1,
		"comparison_operator": "GreaterThanOrEqualToThreshold",
		"treat_missing_data":  "notBreaching",
		// No actions when the variable is empty.
		"alarm_actions": "${compact([var.alarm_topic_arn])}",
	})
	role("cleanup", "leasehold-cleanup-", "states.amazonaws.com", "leasehold-cleanup",
		policy(obj{"Effect": "Allow", "Action": tableActions, "Resource": "#TABLE_ARN#"}))
	stateMachine("cleanup", "cleanup", name+"-cleanup", cleanup)
	role("events", "leasehold-events-", "events.amazonaws.com", "leasehold-start-cleanup",
		strings.ReplaceAll(jsonField(policyDoc(obj{"Effect": "Allow", "Action": []any{"states:StartExecution"}, "Resource": "#CLEANUP_ARN#"})), "#CLEANUP_ARN#", "${aws_sfn_state_machine.cleanup.arn}"))
	add("aws_cloudwatch_event_rule", "cleanup", obj{
		"name_prefix":   "leasehold-cleanup-",
		"description":   tfLiteral(c.ruleDescription()),
		"event_pattern": strings.ReplaceAll(jsonField(EventPattern("#MACHINE_ARN#")), "#MACHINE_ARN#", "${aws_sfn_state_machine.lock.arn}"),
	})
	add("aws_cloudwatch_event_target", "cleanup", obj{
		"rule":     "${aws_cloudwatch_event_rule.cleanup.name}",
		"arn":      "${aws_sfn_state_machine.cleanup.arn}",
		"role_arn": "${aws_iam_role.events.arn}",
	})
	res := obj{}
	for k, v := range resources {
		res[k] = v
	}
	conf["resource"] = res
	conf["output"] = obj{
		"state_machine_arn":         obj{"value": "${aws_sfn_state_machine.lock.arn}"},
		"cleanup_state_machine_arn": obj{"value": "${aws_sfn_state_machine.cleanup.arn}"},
		"log_group_name":            obj{"value": "${aws_cloudwatch_log_group.lock.name}"},
		"lease_lost_alarm_name":     obj{"value": "${aws_cloudwatch_metric_alarm.lease_lost.alarm_name}"},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// templateMachines returns the machine and the cleanup machine that both
// templates deploy. Templates need LambdaARN: the permissions of a Task
// state cannot be known here.
func (c *Config) templateMachines() (machine, cleanup obj, err error) {
	if len(c.Task) > 0 && c.LambdaARN == "" {
		return nil, nil, fmt.Errorf("templates need a Lambda function (--lambda): the permissions of a --task state cannot be known; write its role yourself (docs/step-functions.md)")
	}
	if machine, _, err = c.machine(); err != nil {
		return nil, nil, err
	}
	if cleanup, err = c.cleanupMachine(); err != nil {
		return nil, nil, err
	}
	return machine, cleanup, nil
}
