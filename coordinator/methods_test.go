package coordinator

import (
	"context"
	"io"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestEveryMethodServed: the servers embed grpc-go's Unimplemented types,
// as generated code requires for forward compatibility, but every method
// of every service is implemented. A call with an empty request may be
// refused as invalid; it must never answer Unimplemented.
func TestEveryMethodServed(t *testing.T) {
	c := cluster(t, 1, nil)[0]
	cc := dial(t, c.GRPCAddr())
	agent, rules := allotpb.NewAgentServiceClient(cc), allotpb.NewRulesServiceClient(cc)
	cluster, usage := allotpb.NewClusterServiceClient(cc), allotpb.NewUsageServiceClient(cc)
	shards, resets := allotpb.NewShardServiceClient(cc), allotpb.NewResetsServiceClient(cc)
	balance := allotpb.NewBalanceServiceClient(cc)
	stream := func(s grpc.ClientStream, err error) error {
		if err != nil {
			return err
		}
		if err := s.CloseSend(); err != nil {
			return err
		}
		var m allotpb.BackupChunk
		if err := s.RecvMsg(&m); err != io.EOF {
			return err
		}
		return nil
	}
	calls := map[string]func(ctx context.Context) error{
		"AgentService/Report":   func(ctx context.Context) error { _, err := agent.Report(ctx, &allotpb.ReportRequest{}); return err },
		"AgentService/GetRules": func(ctx context.Context) error { _, err := agent.GetRules(ctx, &allotpb.GetRulesRequest{}); return err },
		"RulesService/ListRules": func(ctx context.Context) error {
			_, err := rules.ListRules(ctx, &allotpb.ListRulesRequest{})
			return err
		},
		"RulesService/GetRule":  func(ctx context.Context) error { _, err := rules.GetRule(ctx, &allotpb.GetRuleRequest{}); return err },
		"RulesService/PutRules": func(ctx context.Context) error { _, err := rules.PutRules(ctx, &allotpb.PutRulesRequest{}); return err },
		"RulesService/DeleteRule": func(ctx context.Context) error {
			_, err := rules.DeleteRule(ctx, &allotpb.DeleteRuleRequest{})
			return err
		},
		"ClusterService/Status": func(ctx context.Context) error { _, err := cluster.Status(ctx, &allotpb.StatusRequest{}); return err },
		"ClusterService/Join":   func(ctx context.Context) error { _, err := cluster.Join(ctx, &allotpb.JoinRequest{}); return err },
		"ClusterService/Remove": func(ctx context.Context) error { _, err := cluster.Remove(ctx, &allotpb.RemoveRequest{}); return err },
		"ClusterService/Identify": func(ctx context.Context) error {
			_, err := cluster.Identify(ctx, &allotpb.IdentifyRequest{})
			return err
		},
		"ClusterService/Backup": func(ctx context.Context) error {
			s, err := cluster.Backup(ctx, &allotpb.BackupRequest{})
			if err != nil {
				return err
			}
			for {
				if _, err := s.Recv(); err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
			}
		},
		"ClusterService/Restore":  func(ctx context.Context) error { return stream(cluster.Restore(ctx)) },
		"UsageService/QueryUsage": func(ctx context.Context) error { _, err := usage.QueryUsage(ctx, &allotpb.UsageQuery{}); return err },
		"BalanceService/GetBalance": func(ctx context.Context) error {
			_, err := balance.GetBalance(ctx, &allotpb.BalanceRequest{})
			return err
		},
		"UsageService/ListNotices": func(ctx context.Context) error {
			_, err := usage.ListNotices(ctx, &allotpb.ListNoticesRequest{})
			return err
		},
		"ShardService/GetShardMap": func(ctx context.Context) error {
			_, err := shards.GetShardMap(ctx, &allotpb.GetShardMapRequest{})
			return err
		},
		"ShardService/AddGroup": func(ctx context.Context) error {
			_, err := shards.AddGroup(ctx, &allotpb.AddGroupRequest{})
			return err
		},
		"ShardService/MoveSlots": func(ctx context.Context) error {
			_, err := shards.MoveSlots(ctx, &allotpb.MoveSlotsRequest{})
			return err
		},
		"ShardService/SlotLoad": func(ctx context.Context) error {
			_, err := shards.SlotLoad(ctx, &allotpb.SlotLoadRequest{})
			return err
		},
		"ShardService/PinSlot": func(ctx context.Context) error {
			_, err := shards.PinSlot(ctx, &allotpb.PinSlotRequest{})
			return err
		},
		"ShardService/GroupSlots": func(ctx context.Context) error {
			_, err := shards.GroupSlots(ctx, &allotpb.GroupSlotsRequest{})
			return err
		},
		"ResetsService/ResetKeys": func(ctx context.Context) error {
			_, err := resets.ResetKeys(ctx, &allotpb.ResetKeysRequest{})
			return err
		},
		"ResetsService/ListResets": func(ctx context.Context) error {
			_, err := resets.ListResets(ctx, &allotpb.ListResetsRequest{})
			return err
		},
	}
	descs := []grpc.ServiceDesc{allotpb.AgentService_ServiceDesc, allotpb.RulesService_ServiceDesc, allotpb.ClusterService_ServiceDesc, allotpb.UsageService_ServiceDesc, allotpb.BalanceService_ServiceDesc, allotpb.ShardService_ServiceDesc, allotpb.ResetsService_ServiceDesc}
	want := 0
	for _, d := range descs {
		want += len(d.Methods) + len(d.Streams)
	}
	if len(calls) != want {
		t.Fatalf("the test calls %d methods; the services have %d", len(calls), want)
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := call(ctx)
		cancel()
		if status.Code(err) == codes.Unimplemented {
			t.Errorf("%s: %v", name, err)
		}
	}
}
