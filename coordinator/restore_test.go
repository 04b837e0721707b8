package coordinator

import (
	"context"
	"github.com/allot-io/allot/internal/testwait"
	"strings"
	"testing"
	"time"

	allotpb "github.com/allot-io/allot/proto"
)

// TestRestoreKeepsThisClustersMembers: a backup carries the member records
// of the cluster it was taken from, but after a restore the cluster must
// still know its own members' addresses: followers forward to the leader
// through them, and agents are sent them for failover.
func TestRestoreKeepsThisClustersMembers(t *testing.T) {
	src := cluster(t, 1, nil)[0]
	var backup strings.Builder
	if _, err := BackupTo(context.Background(), allotpb.NewClusterServiceClient(dial(t, src.GRPCAddr())), &backup); err != nil {
		t.Fatal(err)
	}
	dst := cluster(t, 3, nil)
	l := waitLeader(t, dst)
	if _, err := RestoreFrom(context.Background(), allotpb.NewClusterServiceClient(dial(t, l.GRPCAddr())), strings.NewReader(backup.String()), ""); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, c := range dst {
		want[c.ID()] = c.GRPCAddr()
	}
	for _, c := range dst {
		testwait.For(t, 20*time.Second, c.ID()+" to know this cluster's members after the restore", func() bool {
			if _, addr := c.Leader(); addr != l.GRPCAddr() {
				return false
			}
			ms := c.members()
			for _, m := range ms {
				if want[m.GetId()] != m.GetGrpcAddress() {
					return false
				}
			}
			return len(ms) == len(dst)
		})
	}
	for _, c := range dst {
		if c == l {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := allotpb.NewRulesServiceClient(dial(t, c.GRPCAddr())).PutRules(ctx, &allotpb.PutRulesRequest{Rules: []*allotpb.Rule{quotaRule}})
		cancel()
		if err != nil {
			t.Errorf("a rule put through follower %s after the restore: %v", c.ID(), err)
		}
		break
	}
}
