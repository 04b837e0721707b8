package envoy_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestGatewayDocsEnvoyConfigs: every Envoy configuration docs/gateways.md
// shows is valid Envoy v3 configuration, by Envoy's own schema: it decodes
// strictly into Envoy's messages, typed configs included, and passes their
// validation rules. There is no Envoy binary to run here; this catches a
// misspelt field, a wrong type or a missing required value.
func TestGatewayDocsEnvoyConfigs(t *testing.T) {
	md, err := os.ReadFile("../../docs/gateways.md")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, m := range yamlBlock.FindAllSubmatch(md, -1) {
		if !strings.Contains(string(m[1]), "http_filters:") {
			continue // a rules file or another gateway's configuration
		}
		found++
		var doc map[string]any
		if err := yaml.Unmarshal(m[1], &doc); err != nil {
			t.Fatalf("block %d: %v", found, err)
		}
		for key, v := range doc {
			raw, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			switch key {
			case "http_filters":
				var list []json.RawMessage
				_ = json.Unmarshal(raw, &list)
				for _, f := range list {
					checkEnvoy(t, found, key, f, &hcmv3.HttpFilter{})
				}
			case "clusters":
				var list []json.RawMessage
				_ = json.Unmarshal(raw, &list)
				for _, c := range list {
					checkEnvoy(t, found, key, c, &clusterv3.Cluster{})
				}
			case "route_config":
				checkEnvoy(t, found, key, raw, &routev3.RouteConfiguration{})
			default:
				t.Errorf("block %d: %s is no part of an Envoy configuration this test knows", found, key)
			}
		}
	}
	if found < 3 {
		t.Fatalf("found %d Envoy configurations in docs/gateways.md; want the RLS, ext_authz and RLQS ones", found)
	}
}

type validator interface{ ValidateAll() error }

// checkEnvoy decodes one message strictly and validates it and every
// typed config inside it.
func checkEnvoy(t *testing.T, block int, key string, raw []byte, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal(raw, m); err != nil {
		t.Errorf("block %d, %s: %v\n%s", block, key, err, raw)
		return
	}
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("block %d, %s: %v", block, key, err)
		}
	}
	validateAnys(t, block, key, m)
}

// validateAnys unpacks every typed config in m, and validates it and the
// typed configs in it.
func validateAnys(t *testing.T, block int, key string, m proto.Message) {
	t.Helper()
	eachAny(m, func(a *anypb.Any) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("block %d, %s: %s: %v", block, key, a.GetTypeUrl(), err)
			return
		}
		if v, ok := inner.(validator); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("block %d, %s: %s: %v", block, key, a.GetTypeUrl(), err)
			}
		}
		validateAnys(t, block, key, inner)
	})
}

// eachAny calls fn with every Any in m, at any depth, outside other Anys.
func eachAny(m proto.Message, fn func(*anypb.Any)) {
	if a, ok := m.(*anypb.Any); ok {
		fn(a)
		return
	}
	r := m.ProtoReflect()
	r.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				eachAny(l.Get(i).Message().Interface(), fn)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				eachAny(mv.Message().Interface(), fn)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			eachAny(v.Message().Interface(), fn)
		}
		return true
	})
}
