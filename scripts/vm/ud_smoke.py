"""The harness's proof: two UD QPs on the first RDMA device exchange a datagram each way,
addressed through GID index 1 (::ffff:127.0.0.1 on rxe over lo).  Run inside the VM by
scripts/vm/smoke.sh; prints "UD SMOKE OK" on success.  Needs only pyverbs."""

import sys
import time

from pyverbs import enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

GRH = 40
QKEY = 0x11111111
PORT = 1
GID_INDEX = int(sys.argv[1]) if len(sys.argv) > 1 else 1

names = [d.name.decode() for d in get_device_list()]
ctx = Context(name=names[0])
port = ctx.query_port(PORT)
gid = ctx.query_gid(PORT, GID_INDEX)
print(f"device {names[0]} port {PORT}: state {port.state} active_mtu {128 << port.active_mtu} "
      f"gid[{GID_INDEX}] {gid}")
pd = PD(ctx)
cq = CQ(ctx, 64)
qps, mrs = [], []
qp_attr = QPAttr(port_num=PORT)
qp_attr.qkey = QKEY
qp_attr.pkey_index = 0
for _ in range(2):
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq,
                           cap=QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)),
            qp_attr)
    mr = MR(pd, 2 * 1024, e.IBV_ACCESS_LOCAL_WRITE)
    qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 1024, mr.lkey)]))
    qps.append(qp)
    mrs.append(mr)
ah = AH(pd, attr=AHAttr(port_num=PORT, is_global=1, dlid=port.lid,
                        gr=GlobalRoute(dgid=gid, sgid_index=GID_INDEX)))
t0 = time.monotonic()
for src, dst in ((0, 1), (1, 0)):
    msg = f"hello from qp{qps[src].qp_num} to qp{qps[dst].qp_num}".encode()
    mrs[src].write(msg, len(msg), 1024)
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mrs[src].buf + 1024, len(msg), mrs[src].lkey)],
                send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_ud(ah, qps[dst].qp_num, QKEY)
    qps[src].post_send(wr)
    got = []
    deadline = time.monotonic() + 5
    while len(got) < 2 and time.monotonic() < deadline:
        n, wcs = cq.poll(4)
        got += wcs[:n]
    assert len(got) == 2, f"expected a send and a receive completion, got {len(got)}"
    for wc in got:
        assert wc.status == e.IBV_WC_SUCCESS, f"completion status {wc.status}"
    recv = next(wc for wc in got if wc.opcode == e.IBV_WC_RECV)
    data = mrs[dst].read(recv.byte_len - GRH, GRH)
    assert data == msg, (data, msg)
    assert recv.src_qp == qps[src].qp_num
    print(f"qp{qps[src].qp_num} -> qp{qps[dst].qp_num}: {data.decode()!r} ({recv.byte_len - GRH} B)")
    qps[dst].post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mrs[dst].buf, 1024, mrs[dst].lkey)]))
print(f"UD SMOKE OK ({(time.monotonic() - t0) * 1e3:.1f} ms for two exchanges)")
