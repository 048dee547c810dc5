"""Inside a Slurm allocation (`srun ddprun ...`, one task per node), ddprun
takes the number of nodes, this node's rank and the store's host from
SLURM_NNODES, SLURM_NODEID and the first host of SLURM_JOB_NODELIST: two
agents with synthetic Slurm environments form one job."""
import pytest

from conftest import free_port
from mnutil import Agent, clean_env, read_envs, record, serve_store


def test_two_slurm_tasks_form_one_job(reaper, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    port = free_port()
    agents = []
    for node in (0, 1):
        env = clean_env(OUT=str(out), SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_NNODES="2",
                        SLURM_NODEID=str(node), SLURM_JOB_NODELIST="localhost,gpu-a[01-02]",
                        PET_MASTER_PORT=str(port))
        agents.append(Agent(reaper, tmp_path, f"node{node}",
                            ["--nproc-per-node", str(node + 1), "sh", "-c", record("$RANK")],
                            env=env))
    for node, a in enumerate(agents):
        assert a.wait() == 0, a.stderr()
        assert (f"from Slurm: --nnodes 2 --node-rank {node} --master-addr localhost"
                in a.stderr())
    envs = read_envs(out)
    assert sorted(envs) == [(0,), (1,), (2,)]
    for (rank,), e in envs.items():
        assert e["WORLD_SIZE"] == "3" and e["GROUP_WORLD_SIZE"] == "2"
        assert e["GROUP_RANK"] == ("0" if rank == 0 else "1")
        # The first host's numeric address, never a name that may not resolve.
        assert e["MASTER_ADDR"] in ("127.0.0.1", "::1")
        assert e["MASTER_PORT"] == str(port)


def test_flags_win_over_slurm(reaper, tmp_path):
    env = clean_env(SLURM_JOB_ID="4242", SLURM_NNODES="2", SLURM_NODEID="1",
                    SLURM_JOB_NODELIST="nohost-[1-2]")
    a = Agent(reaper, tmp_path, "single",
              ["--nnodes", "1", "--node-rank", "0", "--master-addr", "127.0.0.1",
               "sh", "-c", 'echo "$WORLD_SIZE $GROUP_RANK"'], env=env)
    assert a.wait() == 0, a.stderr()
    assert a.stdout().split() == ["1", "0"]
    assert "Slurm" not in a.stderr()


def test_one_node_in_an_allocation_of_two_runs_off_its_first_node(reaper, tmp_path):
    """salloc's shell runs on a login node, not the allocation's first node:
    --nnodes 1 (what ddprun(1) says to give there) took the first node's
    address for its store and failed (not an address of this machine), and
    a SLURM_NODEID of 1 made it a usage error. It hosts its store here, as
    node 0, and says what it took from Slurm: the run id."""
    env = clean_env(SLURM_JOB_ID="4242", SLURM_NNODES="2", SLURM_NODEID="1",
                    SLURM_JOB_NODELIST="10.255.0.1,10.255.0.2")
    a = Agent(reaper, tmp_path, "single",
              ["--nnodes", "1", "sh", "-c",
               'echo "$WORLD_SIZE $GROUP_RANK $MASTER_ADDR $TORCHELASTIC_RUN_ID"'], env=env)
    assert a.wait() == 0, a.stderr()
    assert a.stdout().split() == ["1", "0", "127.0.0.1", "4242"]
    assert a.stderr() == "ddprun: from Slurm: --rdzv-id 4242\n", a.stderr()


@pytest.mark.parametrize("bad, flag", [
    ({"SLURM_NNODES": "x"}, ["--nnodes", "1"]),
    ({"SLURM_NODEID": "-1"}, ["--node-rank", "0"]),
    ({"SLURM_JOB_NODELIST": "n[1-"}, ["--master-addr", "127.0.0.1"]),
])
def test_a_malformed_variable_is_an_error_only_when_needed(reaper, tmp_path, bad, flag):
    """ddprun(1), SLURM: a malformed variable that is needed is a usage error
    naming it (and its flag); the flag it stands for makes it not needed."""
    env = clean_env(SLURM_JOB_ID="4242", SLURM_NNODES="1", SLURM_NODEID="0",
                    SLURM_JOB_NODELIST="localhost")
    env.update(bad)
    (var, val), = bad.items()
    a = Agent(reaper, tmp_path, "needed", ["sh", "-c", "echo ran"], env=env)
    assert a.wait() == 2, a.stderr()
    assert a.stdout() == ""
    assert f"{var}='{val}'" in a.stderr() and f"set {flag[0]} instead" in a.stderr()
    a = Agent(reaper, tmp_path, "given", [*flag, "sh", "-c", "echo ran"], env=env)
    assert a.wait() == 0, a.stderr()
    assert a.stdout() == "ran\n"


def test_slurm_variables_without_a_job_id_warn(reaper, tmp_path):
    """SLURM_NNODES copied by hand without SLURM_JOB_ID is no allocation:
    ddprun runs a job of its own, but says so instead of keeping silent."""
    env = clean_env(SLURM_NNODES="2", SLURM_NODEID="1", SLURM_JOB_NODELIST="localhost")
    a = Agent(reaper, tmp_path, "stray", ["sh", "-c", 'echo "$WORLD_SIZE $GROUP_RANK"'],
              env=env)
    assert a.wait() == 0, a.stderr()
    assert a.stdout().split() == ["1", "0"]
    assert ("ddprun: warning: SLURM_NNODES is set but SLURM_JOB_ID is not" in a.stderr())


def test_two_tasks_per_node_refused(reaper, tmp_path):
    """srun --ntasks-per-node=2 ddprun: two agents would claim one node rank.
    The advice works when followed literally: inside an allocation of two
    tasks a node, a lone srun --ntasks-per-node=1 inherits SLURM_NTASKS and
    is ignored (srun warns), so it names the tasks and nodes too."""
    env = clean_env(SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_NNODES="2", SLURM_NODEID="0",
                    SLURM_JOB_NODELIST="localhost,gpu-a1", SLURM_STEP_NUM_NODES="2",
                    SLURM_STEP_NUM_TASKS="4")
    a = Agent(reaper, tmp_path, "twice", ["sh", "-c", "echo ran"], env=env)
    assert a.wait() == 2, a.stderr()
    assert a.stdout() == ""
    assert ("srun started 4 tasks on 2 nodes (SLURM_STEP_NUM_TASKS, SLURM_STEP_NUM_NODES), but "
            "ddprun runs one per node and starts the workers itself (--nproc-per-node): run "
            "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 ddprun ...") in a.stderr()


def test_batch_script_of_several_nodes_refused(reaper, tmp_path):
    """ddprun run by the batch script of a 3-node job, without srun (no
    SLURM_STEP_ID): no other node starts ddprun, so it is refused at once
    (2) instead of waiting join_timeout for nodes 1 and 2; a one-node job's
    script runs it."""
    env = clean_env(SLURM_JOB_ID="4242", SLURM_NNODES="3", SLURM_NODEID="0",
                    SLURM_JOB_NODELIST="localhost,gpu-a[1-2]", PET_MASTER_PORT=str(free_port()))
    a = Agent(reaper, tmp_path, "batch", ["sh", "-c", "echo ran"], env=env)
    assert a.wait() == 2, a.stderr()
    assert a.stdout() == ""
    assert ("SLURM_NNODES=3, but this is no srun step (SLURM_STEP_ID is not set: the batch "
            "script or salloc's shell)") in a.stderr()
    assert "run it as srun ddprun" in a.stderr()
    # --nnodes 1, as the message says, runs it on this node alone.
    a = Agent(reaper, tmp_path, "alone", ["--nnodes", "1", "sh", "-c", "echo ran"], env=env)
    assert a.wait() == 0, a.stderr()
    assert a.stdout() == "ran\n"
    env.update(SLURM_NNODES="1", SLURM_JOB_NODELIST="localhost")
    a = Agent(reaper, tmp_path, "batch1", ["sh", "-c", 'echo "ran $TORCHELASTIC_RUN_ID"'],
              env=env)
    assert a.wait() == 0, a.stderr()
    assert a.stdout() == "ran 4242\n"


def test_nnodes_above_the_steps_nodes_refused_on_every_node(reaper, tmp_path):
    """srun ddprun --nnodes 3 on a step of 2 nodes: node rank 2 is nobody's,
    and node 0 waited join_timeout (600 s) for it, saying "missing node rank
    2". Refused at once (2) on every node, as a --nnodes below is; given
    --node-rank (nodes placed by hand) it is the user's to mean."""
    port = free_port()
    for node in (0, 1):
        env = clean_env(SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_NNODES="2",
                        SLURM_NODEID=str(node), SLURM_JOB_NODELIST="localhost,gpu-a1",
                        PET_MASTER_PORT=str(port))
        a = Agent(reaper, tmp_path, f"node{node}", ["--nnodes", "3", "--rdzv-conf",
                                                    "join_timeout=20", "sh", "-c", "echo ran"],
                  env=env)
        assert a.wait() == 2, a.stderr()
        assert a.stdout() == ""
        assert ("--nnodes 3 is above the 2 nodes of this srun step (SLURM_NNODES), whose node "
                "ranks come from SLURM_NODEID: node rank 2 would never join; run srun "
                "--nodes=3 (in an allocation of as many), or leave --nnodes out") in a.stderr()
    # Nodes placed by hand: node 0 waits for a rank 2 that may come from elsewhere.
    a = Agent(reaper, tmp_path, "byhand", ["--nnodes", "3", "--node-rank", "0", "--rdzv-conf",
                                           "join_timeout=1", "sh", "-c", "echo ran"], env=env)
    assert a.wait() != 2, a.stderr()
    assert "is above" not in a.stderr()


def test_nnodes_below_the_steps_nodes_refused_on_every_node(reaper, tmp_path):
    """srun ddprun --nnodes 2 on a step of 3 nodes: node 0 would wait for a
    node 1 that was refused alone, or run with it while node 2 is refused.
    Every node refuses it alike (2), at once."""
    env = clean_env(SLURM_JOB_ID="4242", SLURM_STEP_ID="0", SLURM_NNODES="3",
                    SLURM_NODEID="0", SLURM_JOB_NODELIST="localhost,gpu-a[1-2]",
                    PET_MASTER_PORT=str(free_port()))
    a = Agent(reaper, tmp_path, "node0", ["--nnodes", "2", "sh", "-c", "echo ran"], env=env)
    assert a.wait() == 2, a.stderr()
    assert a.stdout() == ""
    assert ("--nnodes 2 is below the 3 nodes of this srun step (SLURM_NNODES), whose node "
            "ranks come from SLURM_NODEID: run srun --nodes=2, or leave --nnodes out"
            ) in a.stderr()


def test_a_requeued_job_gets_a_run_id_of_its_own(reaper, tmp_path):
    """A requeued job keeps SLURM_JOB_ID and numbers its steps from 0 again:
    the default run id JOB.STEP repeated the failed run's, and a long-lived
    store (ddpstore serve) refused it ("is taken"), so the requeue failed on
    every node. SLURM_RESTART_COUNT (absent or 0 the first time) tells the
    runs apart; the first keeps JOB.STEP."""
    port = serve_store(reaper)
    args = ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "sh", "-c", 'echo "$TORCHELASTIC_RUN_ID"; exit "$CODE"']
    env = clean_env(SLURM_JOB_ID="5", SLURM_STEP_ID="0", SLURM_NNODES="1", SLURM_NODEID="0",
                    SLURM_JOB_NODELIST="localhost", CODE="1")
    a = Agent(reaper, tmp_path, "first", args, env=env)
    assert a.wait() == 1, a.stderr()
    assert a.stdout() == "5.0\n"
    env.update(SLURM_RESTART_COUNT="1", CODE="0")
    a = Agent(reaper, tmp_path, "requeued", args, env=env)
    assert a.wait() == 0, a.stderr()
    assert a.stdout() == "5.0.r1\n"
    assert "ddprun: from Slurm: --rdzv-id 5.0.r1\n" in a.stderr()


def test_a_run_id_too_long_from_slurm_is_a_usage_error(reaper, tmp_path):
    """A requeued job's default run id, JOB.STEP.rN, longer than a run id may
    be (127 bytes) ran with it: missing from ddpstore status, and refused by
    every libddp worker (TORCHELASTIC_RUN_ID is too long). It is a usage error
    that asks for --rdzv-id; given, the Slurm id is not needed."""
    env = clean_env(SLURM_JOB_ID="1" * 60, SLURM_STEP_ID="2" * 60, SLURM_NNODES="1",
                    SLURM_NODEID="0", SLURM_JOB_NODELIST="localhost",
                    SLURM_RESTART_COUNT="12345")
    args = ["sh", "-c", 'echo "$TORCHELASTIC_RUN_ID"']
    a = Agent(reaper, tmp_path, "long", args, env=env)
    assert a.wait() == 2, a.stderr()
    assert a.stdout() == ""
    assert ("ddprun: error: the run id SLURM_JOB_ID.SLURM_STEP_ID.rSLURM_RESTART_COUNT would "
            "be 128 bytes long, more than the 127 a run id may have: give --rdzv-id"
            ) in a.stderr()
    a = Agent(reaper, tmp_path, "given", ["--rdzv-id", "mine", *args], env=env)
    assert a.wait() == 0, a.stderr()
    assert a.stdout() == "mine\n"
