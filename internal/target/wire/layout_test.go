package wire

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/leakpath/leakpath/internal/testfixture"
)

// TestLayoutMatchesHeader compiles a program against agent/lp_wire.h that
// prints every constant and offset, and compares with this package.
func TestLayoutMatchesHeader(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH: cannot check the layout against lp_wire.h")
	}
	_, here, _, _ := runtime.Caller(0)
	inc := filepath.Join(filepath.Dir(here), "..", "..", "..", "agent")
	src := `#include <stdio.h>
#include <stddef.h>
#include "lp_wire.h"
#define P(name, v) printf("%s %llu\n", name, (unsigned long long)(v))
int main(void) {
P("Version", LP_WIRE_VERSION); P("RegionMagic", LP_REGION_MAGIC); P("HelloMagic", LP_HELLO_MAGIC);
P("HeaderSize", LP_HEADER_SIZE); P("SlotSize", LP_SLOT_SIZE); P("MaxDepth", LP_MAX_DEPTH);
P("Pend", LP_PEND); P("Agg", LP_AGG); P("FoldSize", LP_FOLD_SIZE);
P("sizeof lp_fold <= FoldSize", sizeof(struct lp_fold) <= LP_FOLD_SIZE);
P("OffFoldHead", offsetof(struct lp_fold, head)); P("OffFoldCount", offsetof(struct lp_fold, count)); P("OffFoldPendBytes", offsetof(struct lp_fold, pend_bytes));
P("OffFoldPend", offsetof(struct lp_fold, pend)); P("PendingSize", sizeof(struct lp_pending));
P("OffPendAddr", offsetof(struct lp_pending, addr)); P("OffPendSize", offsetof(struct lp_pending, size));
P("OffPendTS", offsetof(struct lp_pending, ts)); P("OffPendStack", offsetof(struct lp_pending, stack));
P("OffPendFn", offsetof(struct lp_pending, fn));
P("OffFoldAgg", offsetof(struct lp_fold, agg)); P("AggSize", sizeof(struct lp_aggent));
P("OffAggAStack", offsetof(struct lp_aggent, astack)); P("OffAggFStack", offsetof(struct lp_aggent, fstack));
P("OffAggAFn", offsetof(struct lp_aggent, afn)); P("OffAggFFn", offsetof(struct lp_aggent, ffn));
P("OffAggUsed", offsetof(struct lp_aggent, used)); P("OffAggPairs", offsetof(struct lp_aggent, pairs));
P("OffAggBytes", offsetof(struct lp_aggent, bytes)); P("OffAggTemp", offsetof(struct lp_aggent, temporary));
P("OffAggFirst", offsetof(struct lp_aggent, first)); P("OffAggLast", offsetof(struct lp_aggent, last));
P("HelloSize", sizeof(struct lp_hello)); P("WelcomeSize", sizeof(struct lp_welcome));
P("sizeof lp_header <= HeaderSize", sizeof(struct lp_header) <= LP_HEADER_SIZE);
P("sizeof lp_slot", sizeof(struct lp_slot));
P("RecPad", LP_REC_PAD); P("RecAlloc", LP_REC_ALLOC); P("RecFree", LP_REC_FREE);
P("RecReallocBegin", LP_REC_REALLOC_BEGIN); P("RecRealloc", LP_REC_REALLOC); P("RecStack", LP_REC_STACK);
P("RecModule", LP_REC_MODULE); P("RecModuleUnload", LP_REC_MODULE_UNLOAD); P("RecThreadStart", LP_REC_THREAD_START);
P("RecThreadExit", LP_REC_THREAD_EXIT); P("RecFork", LP_REC_FORK); P("RecForkDone", LP_REC_FORK_DONE);
P("RecExec", LP_REC_EXEC); P("RecExecFailed", LP_REC_EXEC_FAILED); P("RecExit", LP_REC_EXIT);
P("RecClock", LP_REC_CLOCK); P("RecThreadName", LP_REC_THREAD_NAME); P("RecAgg", LP_REC_AGG); P("RecAllocLate", LP_REC_ALLOC_LATE); P("RecPending", LP_REC_PENDING); P("RecRefree", LP_REC_REFREE); P("RecIgnore", LP_REC_IGNORE); P("RecRootRegion", LP_REC_ROOT_REGION); P("RecPool", LP_REC_POOL); P("RecPoolAlloc", LP_REC_POOL_ALLOC); P("RecPoolFree", LP_REC_POOL_FREE); P("PoolCreate", LP_POOL_CREATE); P("PoolDestroy", LP_POOL_DESTROY); P("RecFamily", LP_REC_FAMILY); P("FamilyTraced", LP_FAMILY_TRACED); P("FamilyRefused", LP_FAMILY_REFUSED); P("FamilyThreads", LP_FAMILY_THREADS); P("FamilyFailed", LP_FAMILY_FAILED); P("FamilyHooked", LP_FAMILY_HOOKED); P("FamilyUnfollowed", LP_FAMILY_UNFOLLOWED); P("FamilyNoSlot", LP_FAMILY_NOSLOT); P("FamilyNameMax", LP_FAMILY_NAME_MAX); P("FamiliesMax", LP_FAMILIES_MAX); P("HoldFlagOff", LP_HOLD_F_OFF); P("RecMax", LP_REC_MAX);
P("FlagClockTSC", LP_HF_CLOCK_TSC); P("FlagFreeStacks", LP_HF_FREE_STACKS); P("FlagFold", LP_HF_FOLD); P("FlagFoldFreeStacks", LP_HF_FOLD_FREE_STACKS); P("FlagExactTimes", LP_HF_EXACT_TIMES); P("FnTemporary", LP_FN_TEMPORARY);
P("SlotFree", LP_SLOT_FREE); P("SlotActive", LP_SLOT_ACTIVE); P("SlotExited", LP_SLOT_EXITED); P("SlotTaking", LP_SLOT_TAKING);
P("CollectorAlive", LP_COLLECTOR_ALIVE); P("CollectorGone", LP_COLLECTOR_GONE);
#define H(f, name) P(name, offsetof(struct lp_header, f))
H(magic,"OffMagic"); H(version,"OffVersion"); H(header_size,"OffHeaderSize"); H(slot_count,"OffSlotCount");
H(ring_size,"OffRingSize"); H(data_offset,"OffDataOffset"); H(region_size,"OffRegionSize"); H(flags,"OffFlags");
H(max_depth,"OffMaxDepth"); H(collector_pid,"OffCollectorPID"); H(pid,"OffPID"); H(slots_used,"OffSlotsUsed");
H(agent_state,"OffAgentState"); H(next_stack_id,"OffNextStackID"); H(next_module_id,"OffNextModuleID");
H(clock_ts,"OffClockTS"); H(clock_mono,"OffClockMono"); H(clock_real,"OffClockReal"); H(lost_records,"OffLostRecords");
H(fold_offset,"OffFoldOffset"); H(big_slots,"OffBigSlots"); H(big_ring_size,"OffBigRingSize");
H(doorbell,"OffDoorbell"); H(collector_sleeping,"OffCollectorSleeping"); H(progress,"OffProgress");
H(producers_waiting,"OffProducersWaiting"); H(collector_state,"OffCollectorState"); H(now_ts,"OffNowTS");
H(own_table,"OffOwnTable"); H(tls_offset,"OffTLSOffset"); H(tls_size,"OffTLSSize");
P("OwnMax", LP_OWN_MAX); P("OffOwnCount", offsetof(struct lp_own_table, count));
P("OffOwnOverflow", offsetof(struct lp_own_table, overflow)); P("OffOwnRanges", offsetof(struct lp_own_table, r));
P("OwnRangeSize", sizeof(struct lp_own_range));
P("DeadMax", LP_DEAD_MAX); P("OffOwnDeadNext", offsetof(struct lp_own_table, dead_next)); P("OffOwnDead", offsetof(struct lp_own_table, dead));
P("DeadSize", sizeof(struct lp_dead_stack));
H(hold,"OffHold"); H(hold_flags,"OffHoldFlags"); H(hold_supp,"OffHoldSupp"); H(hold_sp,"OffHoldSP"); H(hold_tp,"OffHoldTP"); H(hold_regs,"OffHoldRegs");
H(trace_state,"OffTraceState"); H(trace_tid,"OffTraceTID"); H(trace_addr,"OffTraceAddr"); H(trace_size,"OffTraceSize");
H(trace_stack,"OffTraceStack"); H(suspects_n,"OffSuspectsN"); H(suspects,"OffSuspects"); H(watch_addr,"OffWatchAddr");
H(watch_freed,"OffWatchFreed"); H(trace_skip,"OffTraceSkip"); P("Suspects", LP_SUSPECTS);
H(stale_slots,"OffStaleSlots"); H(stale_sample,"OffStaleSample"); H(stale_base,"OffStaleBase");
H(stale_count,"OffStaleCount"); H(alloc_families,"OffAllocFamilies"); H(stale_page,"OffStalePage"); H(stale_epochs,"OffStaleEpochs"); P("FlagStale", LP_HF_STALE); P("StaleMaxSize", LP_STALE_MAX_SIZE);
H(ask_state,"OffAskState"); H(ask_tid,"OffAskTID"); H(ask_kind,"OffAskKind"); H(ask_result,"OffAskResult"); H(ask_label,"OffAskLabel"); H(ask_sp,"OffAskSP"); H(ask_regs,"OffAskRegs");
P("AskIdle", LP_ASK_IDLE); P("AskClaimed", LP_ASK_CLAIMED); P("AskRequested", LP_ASK_REQUESTED); P("AskTaken", LP_ASK_TAKEN);
P("AskDone", LP_ASK_DONE); P("AskSnapshot", LP_ASK_SNAPSHOT); P("AskLeakCheck", LP_ASK_LEAK_CHECK); P("AskLabelMax", LP_ASK_LABEL_MAX);
P("RecScopeBegin", LP_REC_SCOPE_BEGIN); P("RecScopeEnd", LP_REC_SCOPE_END); P("ScopeNameMax", LP_SCOPE_NAME_MAX);
P("TraceIdle", LP_TRACE_IDLE); P("TraceRequested", LP_TRACE_REQUESTED); P("TraceTaken", LP_TRACE_TAKEN);
P("FlagHoldExit", LP_HF_HOLD_EXIT); P("HoldNone", LP_HOLD_NONE); P("HoldRequested", LP_HOLD_REQUESTED);
P("HoldScanning", LP_HOLD_SCANNING); P("HoldReleased", LP_HOLD_RELEASED);
P("OffSlotHead", offsetof(struct lp_slot, head)); P("OffSlotState", offsetof(struct lp_slot, state));
P("OffSlotTID", offsetof(struct lp_slot, tid)); P("OffSlotTail", offsetof(struct lp_slot, tail));
P("OffHelloMagic", offsetof(struct lp_hello, magic)); P("OffHelloVersion", offsetof(struct lp_hello, version));
P("OffHelloPID", offsetof(struct lp_hello, pid)); P("OffHelloPPID", offsetof(struct lp_hello, ppid));
P("OffHelloParentPID", offsetof(struct lp_hello, parent_pid)); P("OffHelloForkID", offsetof(struct lp_hello, fork_id));
return 0; }
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "l.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "l")
	if err := testfixture.Compile(cc, bin, "-I", inc, filepath.Join(dir, "l.c")); err != nil {
		t.Fatalf("compiling against lp_wire.h: %v", err)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{
		"Version": Version, "RegionMagic": RegionMagic, "HelloMagic": HelloMagic,
		"HeaderSize": HeaderSize, "SlotSize": SlotSize, "MaxDepth": MaxDepth,
		"Pend": Pend, "Agg": Agg, "FoldSize": FoldSize, "sizeof lp_fold <= FoldSize": 1,
		"OffFoldHead": OffFoldHead, "OffFoldCount": OffFoldCount, "OffFoldPendBytes": OffFoldPendBytes, "OffFoldPend": OffFoldPend,
		"PendingSize": PendingSize, "OffPendAddr": OffPendAddr, "OffPendSize": OffPendSize,
		"OffPendTS": OffPendTS, "OffPendStack": OffPendStack, "OffPendFn": OffPendFn,
		"OffFoldAgg": OffFoldAgg, "AggSize": AggSize, "OffAggAStack": OffAggAStack, "OffAggFStack": OffAggFStack,
		"OffAggAFn": OffAggAFn, "OffAggFFn": OffAggFFn, "OffAggUsed": OffAggUsed, "OffAggPairs": OffAggPairs,
		"OffAggBytes": OffAggBytes, "OffAggTemp": OffAggTemp, "OffAggFirst": OffAggFirst, "OffAggLast": OffAggLast,
		"OffFoldOffset": OffFoldOffset, "OffBigSlots": OffBigSlots, "OffBigRingSize": OffBigRingSize,
		"RecAgg": RecAgg, "RecAllocLate": RecAllocLate, "RecPending": RecPending, "RecRefree": RecRefree, "RecIgnore": RecIgnore, "RecRootRegion": RecRootRegion, "RecPool": RecPool, "RecPoolAlloc": RecPoolAlloc, "RecPoolFree": RecPoolFree, "PoolCreate": PoolCreate, "PoolDestroy": PoolDestroy, "RecFamily": RecFamily, "FamilyTraced": FamilyTraced, "FamilyRefused": FamilyRefused, "FamilyThreads": FamilyThreads, "FamilyFailed": FamilyFailed, "FamilyHooked": FamilyHooked, "FamilyUnfollowed": FamilyUnfollowed, "FamilyNoSlot": FamilyNoSlot, "FamilyNameMax": FamilyNameMax, "FamiliesMax": FamiliesMax, "OffAllocFamilies": OffAllocFamilies, "HoldFlagOff": HoldFlagOff, "OffHoldFlags": OffHoldFlags,
		"HelloSize": HelloSize, "WelcomeSize": WelcomeSize,
		"sizeof lp_header <= HeaderSize": 1, "sizeof lp_slot": SlotSize,
		"RecPad": RecPad, "RecAlloc": RecAlloc, "RecFree": RecFree, "RecReallocBegin": RecReallocBegin,
		"RecRealloc": RecRealloc, "RecStack": RecStack, "RecModule": RecModule,
		"RecModuleUnload": RecModuleUnload, "RecThreadStart": RecThreadStart,
		"RecThreadExit": RecThreadExit, "RecFork": RecFork, "RecForkDone": RecForkDone,
		"RecExec": RecExec, "RecExecFailed": RecExecFailed, "RecExit": RecExit,
		"RecClock": RecClock, "RecThreadName": RecThreadName, "RecMax": RecMax,
		"FlagClockTSC": FlagClockTSC, "FlagFreeStacks": FlagFreeStacks, "FlagFold": FlagFold, "FlagFoldFreeStacks": FlagFoldFreeStacks, "FlagExactTimes": FlagExactTimes, "FnTemporary": FnTemporary,
		"SlotFree": SlotFree, "SlotActive": SlotActive, "SlotExited": SlotExited, "SlotTaking": SlotTaking,
		"CollectorAlive": CollectorAlive, "CollectorGone": CollectorGone,
		"OffMagic": OffMagic, "OffVersion": OffVersion, "OffHeaderSize": OffHeaderSize,
		"OffSlotCount": OffSlotCount, "OffRingSize": OffRingSize, "OffDataOffset": OffDataOffset,
		"OffRegionSize": OffRegionSize, "OffFlags": OffFlags, "OffMaxDepth": OffMaxDepth,
		"OffCollectorPID": OffCollectorPID, "OffPID": OffPID, "OffSlotsUsed": OffSlotsUsed,
		"OffAgentState": OffAgentState, "OffNextStackID": OffNextStackID,
		"OffNextModuleID": OffNextModuleID, "OffClockTS": OffClockTS, "OffClockMono": OffClockMono,
		"OffClockReal": OffClockReal, "OffLostRecords": OffLostRecords, "OffDoorbell": OffDoorbell,
		"OffCollectorSleeping": OffCollectorSleeping, "OffProgress": OffProgress,
		"OffProducersWaiting": OffProducersWaiting, "OffCollectorState": OffCollectorState, "OffNowTS": OffNowTS,
		"OffStaleSlots": OffStaleSlots, "OffStaleSample": OffStaleSample, "OffStaleBase": OffStaleBase,
		"OffStaleCount": OffStaleCount, "OffStalePage": OffStalePage, "OffStaleEpochs": OffStaleEpochs, "FlagStale": FlagStale, "StaleMaxSize": StaleMaxSize,
		"OffOwnTable": OffOwnTable, "OffTLSOffset": OffTLSOffset, "OffTLSSize": OffTLSSize,
		"OwnMax": OwnMax, "OffOwnCount": OffOwnCount, "OffOwnOverflow": OffOwnOverflow,
		"OffOwnRanges": OffOwnRanges, "OwnRangeSize": OwnRangeSize,
		"DeadMax": DeadMax, "OffOwnDeadNext": OffOwnDeadNext, "OffOwnDead": OffOwnDead, "DeadSize": DeadSize,
		"OffHold": OffHold, "OffHoldSupp": OffHoldSupp, "OffHoldSP": OffHoldSP, "OffHoldTP": OffHoldTP, "OffHoldRegs": OffHoldRegs,
		"FlagHoldExit": FlagHoldExit, "HoldNone": HoldNone, "HoldRequested": HoldRequested,
		"HoldScanning": HoldScanning, "HoldReleased": HoldReleased,
		"OffTraceState": OffTraceState, "OffTraceTID": OffTraceTID, "OffTraceAddr": OffTraceAddr, "OffTraceSize": OffTraceSize,
		"OffTraceStack": OffTraceStack, "OffSuspectsN": OffSuspectsN, "OffSuspects": OffSuspects, "OffWatchAddr": OffWatchAddr,
		"OffWatchFreed": OffWatchFreed, "OffTraceSkip": OffTraceSkip, "Suspects": Suspects,
		"OffAskState": OffAskState, "OffAskTID": OffAskTID, "OffAskKind": OffAskKind, "OffAskResult": OffAskResult,
		"OffAskLabel": OffAskLabel, "OffAskSP": OffAskSP, "OffAskRegs": OffAskRegs, "AskIdle": AskIdle, "AskClaimed": AskClaimed, "AskRequested": AskRequested,
		"AskTaken": AskTaken, "AskDone": AskDone, "AskSnapshot": AskSnapshot, "AskLeakCheck": AskLeakCheck,
		"AskLabelMax": AskLabelMax, "RecScopeBegin": RecScopeBegin, "RecScopeEnd": RecScopeEnd, "ScopeNameMax": ScopeNameMax,
		"TraceIdle": TraceIdle, "TraceRequested": TraceRequested, "TraceTaken": TraceTaken,
		"OffSlotHead": OffSlotHead, "OffSlotState": OffSlotState, "OffSlotTID": OffSlotTID,
		"OffSlotTail": OffSlotTail, "OffHelloMagic": OffHelloMagic, "OffHelloVersion": OffHelloVersion,
		"OffHelloPID": OffHelloPID, "OffHelloPPID": OffHelloPPID,
		"OffHelloParentPID": OffHelloParentPID, "OffHelloForkID": OffHelloForkID,
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		i := strings.LastIndexByte(line, ' ')
		name, val := line[:i], line[i+1:]
		v, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			t.Fatalf("bad line %q", line)
		}
		w, ok := want[name]
		if !ok {
			t.Errorf("C prints %s which this test does not know", name)
			continue
		}
		seen[name] = true
		if v != w {
			t.Errorf("%s: lp_wire.h says %d, internal/target/wire says %d", name, v, w)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s not printed by the C side", name)
		}
	}
}
