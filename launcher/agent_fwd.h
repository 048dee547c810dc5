/* agent_fwd: --forward-signals, signals that notify the workers and stop
 * nothing (Slurm's --signal=USR1@120 "checkpoint now").
 *
 * Each listed signal that reaches ddprun is sent to every running worker's
 * process group on this node (no SIGCONT, no shutdown timeout) and the job
 * goes on; with several nodes the coordinator (coord_fwd.c) brings it to
 * every other node's workers too, once per delivery. Under srun, one sent
 * by the step's slurmstepd is neither: Slurm signals every process of the
 * step on every node, the workers too (agent_sig.h says where). A listed
 * signal is not handled as a stop signal even if --signals-to-handle names
 * it (cli.c), and SIGUSR2 forwarded is no stack dump request (hang.c). */
#ifndef DDP_AGENT_FWD_H
#define DDP_AGENT_FWD_H

struct agent;

/* How the coordinator takes part. received(arg, sig): sig reached this
 * node's ddprun; returns the rank of the node whose delivery of it reached
 * this node's workers already (merged, coord_fwd.c: nothing is sent), or -1:
 * the agent sends it to its workers now and the coordinator tells the other
 * nodes. */
struct agent_fwd_remote {
	int (*received)(void *arg, int sig);
	void *arg;
};

/* Catch the forwarded signals on the agent's loop. 0 or a libuv error. */
int agent_fwd_start(struct agent *a);
/* r NULL or r->received NULL: this node alone (one node, between rounds). */
void agent_fwd_set_remote(struct agent *a, const struct agent_fwd_remote *r);
/* Send sig to every running local worker's group and say so; from: "node 1"
 * for another node's delivery, NULL for this node's own. */
void agent_fwd_deliver(struct agent *a, int sig, const char *from);
/* Close the loop handles (the agent is ending); release (after the loop). */
void agent_fwd_close(struct agent *a);
void agent_fwd_destroy(struct agent *a);

#endif
