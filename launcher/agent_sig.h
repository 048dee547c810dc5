/* agent_sig: signals caught on the agent's loop, each delivery told apart by
 * its sender: this step's slurmstepd, or anyone else.
 *
 * Under srun (SLURM_STEP_ID set) the step's slurmstepd signals the step's
 * processes on every node of it (scancel, scancel --signal, the time limit,
 * sbatch --signal=SIG@T, srun passing on what it got). With
 * proctrack/linuxproc that is every process it tracks, ddprun's workers
 * too: its delivery to ddprun has reached the workers already, and sent
 * again each worker would get it twice. proctrack/cgroup (Slurm's default)
 * signals only the step's tasks, slurmstepd's own children (ddprun), with
 * anything but SIGKILL, and proctrack/pgid only their process group (each
 * worker has a session of its own): there, where the type cannot be read,
 * and in a batch script (no step id), a delivery is passed on. The
 * slurmstepd is the nearest ancestor of that name; its deliveries are told
 * apart under any proctrack type, since Slurm (22.05) sends a stop signal
 * twice now and then (the time limit), also without ddprun: a repeat that
 * ddprun passed on would reach each worker twice.
 *
 * A set catches its signals with one process-wide SA_SIGINFO handler, which
 * is async-signal-safe: it counts the delivery by sender and wakes the loop.
 * On the loop, cb(arg, sig, from) runs once per delivery. Two sets never
 * share a signal. Every call is made from the loop's thread. */
#ifndef DDP_AGENT_SIG_H
#define DDP_AGENT_SIG_H

#include <stdbool.h>
#include <uv.h>

struct agent_sig;
/* Who sent a delivery. */
enum agent_sig_from {
	AGENT_SIG_ANYONE,    /* anyone but this step's slurmstepd; outside a step, all */
	AGENT_SIG_STEPD,     /* the step's slurmstepd, which signalled ddprun alone */
	AGENT_SIG_STEPD_ALL, /* the step's slurmstepd, which signalled the workers too
			      * (proctrack/linuxproc) */
};
typedef void (*agent_sig_cb)(void *arg, int sig, enum agent_sig_from from);

/* Catch sigs[0..n) on loop. 0 or a negative errno (libuv's or sigaction's).
 * *out is set once allocated, also when the open fails: close and destroy
 * it then too. */
int agent_sig_open(uv_loop_t *loop, const int *sigs, int n, agent_sig_cb cb, void *arg,
		   struct agent_sig **out);
/* Run cb now for what has reached ddprun and the loop has not handled (a
 * worker's exit is then judged after the signal that came before it). */
void agent_sig_drain(struct agent_sig *s);
/* The signals get back the dispositions they had before the open (as
 * uv_signal_stop would give them); the loop handle closes. NULL: nothing. */
void agent_sig_close(struct agent_sig *s);
/* The same where ddprun is ending, its status decided: the signals are
 * ignored from now on, not given back (a default action would end ddprun
 * with the signal instead, as Slurm's repeat of its SIGTERM did, or
 * SIGUSR1 forwarded). stops: the stop signals, which agent_sig_exit_with
 * makes end ddprun after all. */
void agent_sig_end(struct agent_sig *s, bool stops);
/* From now on a stop signal that agent_sig_end ignored ends ddprun at once
 * with status, the job's: main.c's last write of the output it holds, which
 * waits for a reader that may never read (a paused terminal, a pipe nobody
 * reads), must still end on Ctrl-C or SIGTERM. */
void agent_sig_exit_with(int status);
/* Release, after the loop has returned. NULL: nothing. */
void agent_sig_destroy(struct agent_sig *s);

#endif
