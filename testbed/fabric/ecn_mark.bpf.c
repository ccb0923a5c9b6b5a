// SPDX-License-Identifier: GPL-2.0
// ECN marking at a shaped switch port, as a RED queue with ECN marks (DCQCN's congestion point).
//
// A tc program on the port's clsact egress, ahead of its qdiscs: it keeps a virtual queue of the port's shaped
// link (the tbf's rate and burst, as Linux's HBM sample does), and sets CE on ECN-capable IPv4 packets with the
// RED probability of that queue: 0 below kmin, rising linearly to pmax at kmax, 1 from kmax on. It never drops,
// redirects or reclassifies a packet (TC_ACT_OK always), so the qdiscs below see every packet as before.
//
// Each attached copy has maps of its own: config (written by testbed/fabric/ecn.py after attaching; all zero:
// pass everything untouched), state (the virtual queue), counters and pause (written by the PFC pause process,
// testbed/fabric/pfcd.py, when it pauses and resumes this port: a paused port sends nothing, so its virtual
// queue must not drain meanwhile).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ECN_MASK 3
#define ECN_CE 3
#define NS_PER_S 1000000000ULL

struct config {
    __u64 rate;         // the link's rate, bytes/s (0: not configured yet)
    __u64 burst;        // the tbf's bucket, bytes: traffic within it passes without queueing
    __u64 limit;        // the tbf's queue, bytes: beyond it the real queue drops
    __u64 kmin, kmax;   // queue bytes
    __u64 pmax;         // marking probability at kmax, scaled by 2^32
    __u32 skip_mark;    // frames with this skb mark were seen already (the delay line sends them again); 0: none
    __u32 pad;
};

struct state {
    struct bpf_spin_lock lock;
    __u64 backlog;      // the virtual queue, bytes, the tbf's bucket included
    __u64 last_ns;      // when it was last updated
};

// The port's paused time, on the program's clock (CLOCK_MONOTONIC ns): the virtual queue runs on a clock that
// stops while the port is paused.
struct pause {
    __u64 since;        // when the current pause began; 0: not paused
    __u64 total;        // the length of every pause that has ended
};

struct counters {
    __u64 packets;      // every frame seen
    __u64 ect;          // IPv4 packets ECN-capable (ECT(0), ECT(1), or CE already)
    __u64 marked;       // packets this port set CE on
    __u64 queue;        // the virtual queue's last value, bytes (bucket left out)
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct config);
} ecn_config SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct state);
} ecn_state SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct counters);
} ecn_counters SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct pause);
} ecn_pause SEC(".maps");

// The time the port has been free to send: now, less its pauses.
static __always_inline __u64 sending_time(const struct pause *p, __u64 now)
{
    __u64 paused = p->total + (p->since && p->since < now ? now - p->since : 0);
    return now > paused ? now - paused : 0;
}

// The RED probability of queue q (bytes), scaled by 2^32.
static __always_inline __u64 mark_threshold(const struct config *c, __u64 q)
{
    if (q >= c->kmax)
        return 1ULL << 32;
    if (q < c->kmin)
        return 0;
    return c->pmax * (q - c->kmin) / (c->kmax - c->kmin);
}

// The virtual queue at `now` before this frame (bucket left out), and with the frame added unless the real
// queue would drop it. Drained at the link's rate since the last update; a clock behind the last update (a
// state written from user space) drains nothing.
static __always_inline __u64 enqueue(const struct config *c, struct state *s, __u64 now, __u64 len)
{
    __u64 elapsed = now > s->last_ns ? now - s->last_ns : 0;
    __u64 backlog = s->backlog, q;

    if (elapsed >= NS_PER_S)
        backlog = 0;        // idle for a second: empty (and no overflow below)
    else {
        __u64 drained = elapsed * c->rate / NS_PER_S;
        backlog = backlog > drained ? backlog - drained : 0;
    }
    q = backlog > c->burst ? backlog - c->burst : 0;
    if (q + len <= c->limit)
        backlog += len;
    s->backlog = backlog;
    if (now > s->last_ns)
        s->last_ns = now;
    return q;
}

SEC("tc")
int ecn_mark(struct __sk_buff *skb)
{
    __u32 zero = 0;
    struct config *c = bpf_map_lookup_elem(&ecn_config, &zero);
    struct state *s = bpf_map_lookup_elem(&ecn_state, &zero);
    struct counters *n = bpf_map_lookup_elem(&ecn_counters, &zero);
    struct pause *p = bpf_map_lookup_elem(&ecn_pause, &zero);
    __u64 q, now, len = skb->len;

    if (!c || !s || !n || !p || !c->rate)
        return TC_ACT_OK;
    if (c->skip_mark && skb->mark == c->skip_mark)
        return TC_ACT_OK;
    __sync_fetch_and_add(&n->packets, 1);

    now = sending_time(p, bpf_ktime_get_ns());     // no call while the lock is held
    bpf_spin_lock(&s->lock);
    q = enqueue(c, s, now, len);
    bpf_spin_unlock(&s->lock);
    n->queue = q;

    if (skb->protocol != bpf_htons(ETH_P_IP))
        return TC_ACT_OK;
    if (bpf_skb_pull_data(skb, ETH_HLEN + sizeof(struct iphdr)))
        return TC_ACT_OK;
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    struct iphdr *ip = data + ETH_HLEN;
    if ((void *)(ip + 1) > end)
        return TC_ACT_OK;
    __u8 tos = ip->tos;
    if (!(tos & ECN_MASK))
        return TC_ACT_OK;           // Not-ECT: never marked (a RED queue would drop it; this one only marks)
    __sync_fetch_and_add(&n->ect, 1);
    if ((tos & ECN_MASK) == ECN_CE || (__u64)bpf_get_prandom_u32() >= mark_threshold(c, q))
        return TC_ACT_OK;

    // CE, and the header checksum updated over the 16-bit word that holds the TOS byte (as it is in memory)
    __u8 ce = tos | ECN_CE, word[2] = {*(__u8 *)ip, ce};
    __u16 old_word = *(__u16 *)ip, new_word;
    __builtin_memcpy(&new_word, word, sizeof(new_word));
    if (bpf_skb_store_bytes(skb, ETH_HLEN + __builtin_offsetof(struct iphdr, tos), &ce, 1, 0))
        return TC_ACT_OK;
    bpf_l3_csum_replace(skb, ETH_HLEN + __builtin_offsetof(struct iphdr, check), old_word, new_word,
                        sizeof(__u16));
    __sync_fetch_and_add(&n->marked, 1);
    return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
