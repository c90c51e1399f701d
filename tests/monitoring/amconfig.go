// amconfig: the Prometheus Operator's own code on gpulet's AlertmanagerConfig
// (deploy/monitoring/alertmanagerconfig.yaml). It decodes the object strictly into the
// operator's v1alpha1 type (an unknown or misspelt field is an error), runs the operator's
// validation of it (pkg/alertmanager/validation/v1alpha1), and merges it into a base
// alertmanager.yml the way the operator's Alertmanager controller does
// (pkg/alertmanager.ConfigBuilder), with the Secrets it names standing in with a placeholder
// token. The merged configuration goes to stdout, for amtool and a real Alertmanager
// (tests/amtool_routes_test.sh).
//
// Usage: amconfig CR.yaml BASE.yml ALERTMANAGER_VERSION [MATCHER_STRATEGY]
//
//	MATCHER_STRATEGY: None (default) or OnNamespace, the Alertmanager's
//	alertmanagerConfigMatcherStrategy.
//
// Built by scripts/e2e/build.sh --tools against
// github.com/prometheus-operator/prometheus-operator at the version it pins.
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/blang/semver/v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/prometheus-operator/prometheus-operator/pkg/alertmanager"
	validation "github.com/prometheus-operator/prometheus-operator/pkg/alertmanager/validation/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"github.com/prometheus-operator/prometheus-operator/pkg/assets"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "amconfig: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 4 || len(os.Args) > 5 {
		fail("usage: amconfig CR.yaml BASE.yml ALERTMANAGER_VERSION [None|OnNamespace]")
	}
	crText, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail("%v", err)
	}
	base, err := os.ReadFile(os.Args[2])
	if err != nil {
		fail("%v", err)
	}
	version, err := semver.ParseTolerant(os.Args[3])
	if err != nil {
		fail("Alertmanager version %q: %v", os.Args[3], err)
	}
	strategy := monitoringv1.NoneConfigMatcherStrategyType
	if len(os.Args) == 5 {
		strategy = monitoringv1.AlertmanagerConfigMatcherStrategyType(os.Args[4])
	}

	var amc monitoringv1alpha1.AlertmanagerConfig
	if err := yaml.UnmarshalStrict(crText, &amc); err != nil {
		fail("%s is not an AlertmanagerConfig as the operator reads it: %v", os.Args[1], err)
	}
	if amc.Kind != "AlertmanagerConfig" || amc.APIVersion != "monitoring.coreos.com/v1alpha1" {
		fail("%s: kind %q, apiVersion %q", os.Args[1], amc.Kind, amc.APIVersion)
	}
	if err := validation.ValidateAlertmanagerConfig(&amc); err != nil {
		fail("the operator refuses %s: %v", os.Args[1], err)
	}

	// The Secrets the receivers name, as the user creates them.
	secrets := map[string]*corev1.Secret{}
	for _, r := range amc.Spec.Receivers {
		for _, t := range r.TelegramConfigs {
			if t.BotToken == nil {
				continue
			}
			s, ok := secrets[t.BotToken.Name]
			if !ok {
				s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: t.BotToken.Name,
					Namespace: amc.Namespace}, Data: map[string][]byte{}}
				secrets[t.BotToken.Name] = s
			}
			s.Data[t.BotToken.Key] = []byte("123456789:AAE-placeholder-token")
		}
	}
	var objects []interface{}
	for _, s := range secrets {
		objects = append(objects, s)
	}

	am := &monitoringv1.Alertmanager{
		ObjectMeta: metav1.ObjectMeta{Name: "main", Namespace: "monitoring"},
		Spec: monitoringv1.AlertmanagerSpec{
			AlertmanagerConfigMatcherStrategy: monitoringv1.AlertmanagerConfigMatcherStrategy{
				Type: strategy,
			},
		},
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cb := alertmanager.NewConfigBuilder(logger, version, assets.NewTestStoreBuilder(objects...), am)
	if err := cb.InitializeFromRawConfiguration(base); err != nil {
		fail("base configuration %s: %v", os.Args[2], err)
	}
	key := amc.Namespace + "/" + amc.Name
	if err := cb.AddAlertmanagerConfigs(context.Background(),
		map[string]*monitoringv1alpha1.AlertmanagerConfig{key: &amc}); err != nil {
		fail("the operator cannot merge %s: %v", os.Args[1], err)
	}
	out, err := cb.MarshalJSON() // YAML, despite the name
	if err != nil {
		fail("%v", err)
	}
	if _, err := io.Copy(os.Stdout, bytes.NewReader(out)); err != nil {
		fail("%v", err)
	}
}
