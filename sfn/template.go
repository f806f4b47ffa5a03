package sfn

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Logical ids of the CloudFormation template's resources.
const (
	CFNTable           = "LockTable"
	CFNMachine         = "LockMachine"
	CFNMachineRole     = "LockMachineRole"
	CFNCleanup         = "CleanupMachine"
	CFNCleanupRole     = "CleanupMachineRole"
	CFNCleanupRule     = "CleanupRule"
	CFNCleanupRuleRole = "CleanupRuleRole"
)

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

// CloudFormation returns a CloudFormation template (JSON; SAM deploys it
// as it is) with the lock machine and its role, the DynamoDB table in the
// store's key schema (kept when the stack is deleted: it holds the fencing
// counters) unless ExistingTable, the cleanup machine and its role, and
// the EventBridge rule (with its role) that starts the cleanup machine.
// The roles allow exactly dynamodb:UpdateItem on the table,
// lambda:InvokeFunction on the function, and states:StartExecution on the
// cleanup machine. It needs LambdaARN: a Task state's permissions cannot
// be known here.
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
		obj{"Effect": "Allow", "Action": []any{"lambda:InvokeFunction"}, "Resource": c.LambdaARN})
	resources[CFNMachine] = stateMachine(c.name(), CFNMachineRole, machine)
	resources[CFNCleanupRole] = role("states.amazonaws.com", "leasehold-cleanup",
		obj{"Effect": "Allow", "Action": tableActions, "Resource": tableArn})
	resources[CFNCleanup] = stateMachine(c.name()+"-cleanup", CFNCleanupRole, cleanup)
	resources[CFNCleanupRuleRole] = role("events.amazonaws.com", "leasehold-start-cleanup",
		obj{"Effect": "Allow", "Action": []any{"states:StartExecution"}, "Resource": obj{"Ref": CFNCleanup}})
	resources[CFNCleanupRule] = obj{
		"Type": "AWS::Events::Rule",
		"Properties": obj{
			"Description":  fmt.Sprintf("Starts the leasehold cleanup machine when an execution of %s ends FAILED, TIMED_OUT or ABORTED.", c.name()),
			"State":        "ENABLED",
			"EventPattern": EventPattern(obj{"Ref": CFNMachine}),
			"Targets": []any{obj{
				"Id":      "leasehold-cleanup",
				"Arn":     obj{"Ref": CFNCleanup},
				"RoleArn": obj{"Fn::GetAtt": []any{CFNCleanupRuleRole, "Arn"}},
			}},
		},
	}
	tmpl := obj{
		"AWSTemplateFormatVersion": "2010-09-09",
		"Description": fmt.Sprintf("leasehold: runs %s under the lock %q (DynamoDB table %s), with cleanup of dead executions.",
			c.LambdaARN, c.Lock, c.Table),
		"Resources": resources,
		"Outputs": obj{
			"StateMachineArn":        obj{"Value": obj{"Ref": CFNMachine}},
			"CleanupStateMachineArn": obj{"Value": obj{"Ref": CFNCleanup}},
		},
	}
	return json.MarshalIndent(tmpl, "", "  ")
}

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

// Terraform returns the resources of CloudFormation as a Terraform JSON
// configuration (a file named *.tf.json), for the hashicorp/aws provider:
// aws_dynamodb_table (with prevent_destroy; a data source when
// ExistingTable), aws_iam_role and aws_iam_role_policy for each role,
// aws_sfn_state_machine for both machines, aws_cloudwatch_event_rule and
// aws_cloudwatch_event_target.
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
	stateMachine := func(id, roleID, name string, definition obj) {
		add("aws_sfn_state_machine", id, obj{
			"name": name, "type": "STANDARD",
			"role_arn":   "${aws_iam_role." + roleID + ".arn}",
			"definition": jsonField(definition),
		})
	}
	role("machine", "leasehold-lock-", "states.amazonaws.com", "leasehold-lock", policy(
		obj{"Effect": "Allow", "Action": tableActions, "Resource": "#TABLE_ARN#"},
		obj{"Effect": "Allow", "Action": []any{"lambda:InvokeFunction"}, "Resource": c.LambdaARN}))
	stateMachine("lock", "machine", name, machine)
	role("cleanup", "leasehold-cleanup-", "states.amazonaws.com", "leasehold-cleanup",
		policy(obj{"Effect": "Allow", "Action": tableActions, "Resource": "#TABLE_ARN#"}))
	stateMachine("cleanup", "cleanup", name+"-cleanup", cleanup)
	role("events", "leasehold-events-", "events.amazonaws.com", "leasehold-start-cleanup",
		strings.ReplaceAll(jsonField(policyDoc(obj{"Effect": "Allow", "Action": []any{"states:StartExecution"}, "Resource": "#CLEANUP_ARN#"})), "#CLEANUP_ARN#", "${aws_sfn_state_machine.cleanup.arn}"))
	add("aws_cloudwatch_event_rule", "cleanup", obj{
		"name_prefix":   "leasehold-cleanup-",
		"description":   tfLiteral(fmt.Sprintf("Starts the leasehold cleanup machine when an execution of %s ends FAILED, TIMED_OUT or ABORTED.", name)),
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
