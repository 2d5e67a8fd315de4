-- btlcore's wire format for Wireshark and tshark: protocol "btl".
--
-- Shipped in the btlcore package (btlcore/wireshark/btl.lua); `btl wireshark --path` prints
-- where it is, `btl wireshark --install` copies it into your personal Lua plugin folder.
-- Or load it for one run:  tshark -X lua_script:$(btl wireshark --path) -r run.pcapng
--
-- What it decodes (btlcore/protocol/wire.py is the codec, docs/protocol.md its prose):
--   * the 36-byte header of wire versions 1 and 2, every field filterable (btl.version,
--     btl.type, btl.flags and its bits, btl.dst_conn, btl.src_incarnation, btl.crc,
--     btl.seq, btl.ack, btl.tag, btl.payload_len), the chunk (btl.chunk.*) and put
--     (btl.put.*) extensions, and the CRC32C checked (btl.crc.good, btl.crc.bad);
--   * T_ACK: window, flags, ACK delay, and each SACK block both as sent (btl.sack.start,
--     btl.sack.length, relative to the ACK) and as sequence numbers (btl.sack.left,
--     btl.sack.right: the first and last received);
--   * T_HELLO / T_HELLO_ACK: the body and (version 2) each transport parameter (btl.tp.*);
--   * version 2's T_CLOSE / T_CLOSE_ACK, T_UNKNOWN_CONN, T_CHALLENGE / T_RESPONSE, T_PING,
--     a put status (T_DATA with the STATUS flag), and the VERSION reply (version byte 0);
--   * retransmissions: btl.analysis.retransmission on a DATA segment whose seq its flow
--     carried before, btl.analysis.first_frame naming the frame that first did.
--
-- Where: UDP port 7471 (the simulator's pcaps and btlcore_plugins.pcap), and any other UDP
-- port through a heuristic dissector that checks the version, the type, the flags and that
-- the header's lengths add up to the datagram's (so unrelated traffic is left alone); a
-- capture cut short (tcpdump -s) still shows every header.
-- Enable or disable it under Analyze > Enabled Protocols (btl_udp).

local WIRE_PORT = 7471
local HEADER_LEN = 36

local btl = Proto("btl", "btlcore")

local T_DATA, T_ACK, T_HELLO, T_HELLO_ACK = 1, 2, 3, 4
local T_CLOSE, T_CLOSE_ACK, T_UNKNOWN_CONN = 5, 6, 7
local T_CHALLENGE, T_RESPONSE, T_PING, T_VERSION = 8, 9, 10, 11

local type_names = {
    [T_DATA] = "DATA", [T_ACK] = "ACK", [T_HELLO] = "HELLO", [T_HELLO_ACK] = "HELLO_ACK",
    [T_CLOSE] = "CLOSE", [T_CLOSE_ACK] = "CLOSE_ACK", [T_UNKNOWN_CONN] = "UNKNOWN_CONN",
    [T_CHALLENGE] = "CHALLENGE", [T_RESPONSE] = "RESPONSE", [T_PING] = "PING",
    [T_VERSION] = "VERSION",
}
-- the types each wire version knows (a type outside its version's set is not btlcore)
local types_by_version = {
    [1] = {[1] = true, [2] = true, [3] = true, [4] = true},
    [2] = {[1] = true, [2] = true, [3] = true, [4] = true, [5] = true, [6] = true, [7] = true,
           [8] = true, [9] = true, [10] = true},
}
-- version 2's types whose body has one fixed size
local body_size = {[T_CLOSE] = 12, [T_CLOSE_ACK] = 12, [T_UNKNOWN_CONN] = 12,
                   [T_CHALLENGE] = 8, [T_RESPONSE] = 8, [T_PING] = 12}

local F_ACK, F_CHUNK, F_PUT, F_CRC, F_STATUS = 0x01, 0x02, 0x04, 0x08, 0x10
local KNOWN_FLAGS = 0x1F
local close_reasons = {[0] = "closed", [1] = "disconnected", [2] = "protocol error",
                       [3] = "limit exceeded"}
local put_status_names = {[0] = "landed", [1] = "unknown key", [2] = "out of bounds",
                          [3] = "region unexposed while the put was arriving"}
local tp_names = {[0] = "padding", [1] = "max_datagram_size", [2] = "max_message_size",
                  [3] = "peer_timeout_ms", [4] = "window_bytes"}

local f = {
    version = ProtoField.uint8("btl.version", "Version", base.DEC),
    type = ProtoField.uint8("btl.type", "Type", base.DEC, type_names),
    flags = ProtoField.uint8("btl.flags", "Flags", base.HEX),
    flag_ack = ProtoField.bool("btl.flags.ack", "ACK (the ack field is valid)", 8, nil, F_ACK),
    flag_chunk = ProtoField.bool("btl.flags.chunk", "CHUNK (chunk extension follows)", 8, nil, F_CHUNK),
    flag_put = ProtoField.bool("btl.flags.put", "PUT (put extension follows)", 8, nil, F_PUT),
    flag_crc = ProtoField.bool("btl.flags.crc", "CRC (the crc field is a CRC32C)", 8, nil, F_CRC),
    flag_status = ProtoField.bool("btl.flags.status", "STATUS (a put status)", 8, nil, F_STATUS),
    hello_flags = ProtoField.uint8("btl.hello_flags", "HELLO flags", base.HEX),
    hf_crc_required = ProtoField.bool("btl.hello_flags.crc_required", "CRC required", 8, nil, 0x01),
    dst_conn = ProtoField.uint32("btl.dst_conn", "Destination connection", base.DEC),
    src_incarnation = ProtoField.uint32("btl.src_incarnation", "Source incarnation", base.HEX),
    crc = ProtoField.uint32("btl.crc", "CRC32C", base.HEX),
    crc_good = ProtoField.bool("btl.crc.good", "CRC good"),
    crc_bad = ProtoField.bool("btl.crc.bad", "CRC bad"),
    seq = ProtoField.uint64("btl.seq", "Sequence number", base.DEC),
    ack = ProtoField.uint64("btl.ack", "Cumulative ACK", base.DEC),
    tag = ProtoField.uint16("btl.tag", "Tag", base.DEC),
    payload_len = ProtoField.uint16("btl.payload_len", "Payload length", base.DEC),
    msg_id = ProtoField.uint32("btl.chunk.msg_id", "Message id", base.DEC),
    msg_len = ProtoField.uint32("btl.chunk.msg_len", "Message length", base.DEC),
    chunk_offset = ProtoField.uint32("btl.chunk.offset", "Chunk offset", base.DEC),
    put_key = ProtoField.uint32("btl.put.key", "Put region key", base.DEC),
    put_offset = ProtoField.uint64("btl.put.offset", "Put offset", base.DEC),
    payload = ProtoField.bytes("btl.payload", "Payload"),
    put_seq = ProtoField.uint64("btl.put_status.seq", "Put's last sequence number", base.DEC),
    put_status = ProtoField.uint8("btl.put_status.status", "Put status", base.DEC, put_status_names),
    window = ProtoField.uint32("btl.ack.window", "Receive window (segments)", base.DEC),
    nranges = ProtoField.uint8("btl.ack.nranges", "SACK ranges", base.DEC),
    ack_flags = ProtoField.uint8("btl.ack.flags", "ACK flags", base.HEX),
    af_truncated = ProtoField.bool("btl.ack.flags.truncated", "TRUNCATED (ranges left out)", 8, nil, 0x01),
    af_duplicate = ProtoField.bool("btl.ack.flags.duplicate", "DUPLICATE (a duplicate arrived)", 8, nil, 0x02),
    ack_delay = ProtoField.uint32("btl.ack.delay", "ACK delay (microseconds)", base.DEC),
    sack = ProtoField.none("btl.sack", "SACK block"),
    sack_start = ProtoField.uint32("btl.sack.start", "Start (above the ACK)", base.DEC),
    sack_length = ProtoField.uint32("btl.sack.length", "Length (segments)", base.DEC),
    sack_left = ProtoField.uint64("btl.sack.left", "First sequence number received", base.DEC),
    sack_right = ProtoField.uint64("btl.sack.right", "Last sequence number received", base.DEC),
    hello_incarnation = ProtoField.uint32("btl.hello.incarnation", "Incarnation", base.HEX),
    hello_conn = ProtoField.uint32("btl.hello.conn_id", "Connection id", base.DEC),
    hello_isn = ProtoField.uint64("btl.hello.isn", "Initial sequence number", base.DEC),
    hello_echo = ProtoField.uint32("btl.hello.echo_incarnation", "Echoed incarnation", base.HEX),
    hello_window = ProtoField.uint32("btl.hello.window", "Receive window (segments)", base.DEC),
    hello_mad = ProtoField.uint32("btl.hello.max_ack_delay", "Max ACK delay (microseconds)", base.DEC),
    hello_addr_len = ProtoField.uint16("btl.hello.addr_len", "Address length", base.DEC),
    hello_address = ProtoField.bytes("btl.hello.address", "Address"),
    tp = ProtoField.none("btl.tp", "Transport parameter"),
    tp_type = ProtoField.uint16("btl.tp.type", "Type", base.HEX, tp_names),
    tp_length = ProtoField.uint16("btl.tp.length", "Length", base.DEC),
    tp_value = ProtoField.bytes("btl.tp.value", "Value"),
    tp_max_datagram = ProtoField.uint32("btl.tp.max_datagram_size", "max_datagram_size", base.DEC),
    tp_max_message = ProtoField.uint32("btl.tp.max_message_size", "max_message_size", base.DEC),
    tp_peer_timeout = ProtoField.uint32("btl.tp.peer_timeout_ms", "peer_timeout_ms", base.DEC),
    tp_window_bytes = ProtoField.uint64("btl.tp.window_bytes", "window_bytes", base.DEC),
    close_conn = ProtoField.uint32("btl.close.conn_id", "Sender's connection id", base.DEC),
    close_echo = ProtoField.uint32("btl.close.echo_incarnation", "Echoed incarnation", base.HEX),
    close_reason = ProtoField.uint16("btl.close.reason", "Reason", base.DEC, close_reasons),
    notice_echo = ProtoField.uint32("btl.notice.echo_incarnation", "Echoed incarnation", base.HEX),
    notice_digest = ProtoField.uint32("btl.notice.echo_digest", "Echoed datagram CRC32C", base.HEX),
    notice_type = ProtoField.uint8("btl.notice.echo_type", "Echoed type", base.DEC, type_names),
    nonce = ProtoField.uint64("btl.nonce", "Nonce", base.HEX),
    reserved = ProtoField.bytes("btl.reserved", "Reserved"),
    vn_count = ProtoField.uint8("btl.version_reply.count", "Versions listed", base.DEC),
    vn_dst = ProtoField.uint32("btl.version_reply.echo_dst_conn", "Echoed dst_conn", base.DEC),
    vn_inc = ProtoField.uint32("btl.version_reply.echo_incarnation", "Echoed incarnation", base.HEX),
    vn_version = ProtoField.uint8("btl.version_reply.version", "Version spoken", base.DEC),
    vn_crc = ProtoField.uint32("btl.version_reply.crc", "CRC32C", base.HEX),
    retransmission = ProtoField.bool("btl.analysis.retransmission", "Retransmission (this seq was seen before)"),
    first_frame = ProtoField.framenum("btl.analysis.first_frame", "First seen in frame"),
}
local field_list = {}
for _, field in pairs(f) do field_list[#field_list + 1] = field end
btl.fields = field_list

local ex_bad_crc = ProtoExpert.new("btl.crc.bad.expert", "Bad CRC32C", expert.group.CHECKSUM, expert.severity.ERROR)
local ex_malformed = ProtoExpert.new("btl.malformed", "Not a well-formed btlcore datagram",
                                     expert.group.MALFORMED, expert.severity.ERROR)
local ex_retransmission = ProtoExpert.new("btl.analysis.retransmission.expert", "Retransmission",
                                         expert.group.SEQUENCE, expert.severity.NOTE)
btl.experts = {ex_bad_crc, ex_malformed, ex_retransmission}

btl.prefs.check_crc = Pref.bool("Verify CRC32C", true, "Check the CRC32C of datagrams that carry one")

-- CRC32C (Castagnoli, reflected 0x82F63B78), the table built once
local band, bxor, rshift, bnot = bit32.band, bit32.bxor, bit32.rshift, bit32.bnot
local crc_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) == 1 then c = bxor(rshift(c, 1), 0x82F63B78) else c = rshift(c, 1) end
    end
    crc_table[i] = c
end

-- continue the CRC32C ``crc`` (a finished value, 0 to start) over tvb bytes [from, to)
local function crc32c(tvb, from, to, crc)
    crc = bnot(crc)
    if to > from then
        local bytes = tvb:raw(from, to - from)
        for i = 1, #bytes do
            crc = bxor(crc_table[band(bxor(crc, bytes:byte(i)), 0xFF)], rshift(crc, 8))
        end
    end
    return bnot(crc)
end

-- extension bytes after the header, by the CHUNK and PUT flags
local function ext_len(flags)
    local n = 0
    if band(flags, F_CHUNK) ~= 0 then n = n + 12 end
    if band(flags, F_PUT) ~= 0 then n = n + 12 end
    return n
end

-- true if the body of a ``typ`` datagram of payload_len ``plen`` at ``at`` is consistent
local function body_ok(tvb, version, typ, flags, at, plen)
    if typ ~= T_DATA and band(flags, F_CHUNK + F_PUT + F_STATUS) ~= 0 then return false end
    if body_size[typ] then return plen == body_size[typ] end
    if typ == T_ACK then
        return plen >= 12 and plen == 12 + 8 * tvb(at + 4, 1):uint()
    elseif typ == T_HELLO or typ == T_HELLO_ACK then
        if plen < 30 then return false end
        local rest = plen - 30 - tvb(at + 28, 2):uint()
        return rest >= 0 and (version >= 2 or rest == 0)
    elseif band(flags, F_STATUS) ~= 0 then
        return plen == 12 and band(flags, F_CHUNK + F_PUT) == 0
    end
    return true
end

-- the heuristic: is this UDP payload a btlcore datagram of a version this file knows?  The
-- lengths are checked against the datagram's real size (a capture may have cut it short:
-- then only what was captured of the body is checked)
local function looks_like_btl(tvb)
    local n, cap = tvb:reported_len(), tvb:len()
    if cap < 16 then return false end
    local version, typ = tvb(0, 1):uint(), tvb(1, 1):uint()
    if version == 0 then  -- a VERSION reply: 12 + count + 4 bytes, its own CRC32C
        local count = tvb(2, 1):uint()
        return typ == T_VERSION and count >= 1 and n == 16 + count and cap == n
            and tvb(n - 4, 4):uint() == crc32c(tvb, 0, n - 4, 0)
    end
    if cap < HEADER_LEN or not types_by_version[version] or not types_by_version[version][typ] then
        return false
    end
    local flags, hflags = tvb(2, 1):uint(), tvb(3, 1):uint()
    if band(flags, bnot(KNOWN_FLAGS)) ~= 0 or band(hflags, 0xFE) ~= 0 then return false end
    if tvb(8, 4):uint() == 0 then return false end  -- src_incarnation is never 0
    local at = HEADER_LEN + ext_len(flags)
    local plen = tvb(34, 2):uint()
    if n ~= at + plen then return false end
    return cap < n and cap < at + 30 or body_ok(tvb, version, typ, flags, at, plen)
end

local function flag_names(flags)
    local out = {}
    local names = {[F_ACK] = "ACK", [F_CHUNK] = "CHUNK", [F_PUT] = "PUT", [F_CRC] = "CRC", [F_STATUS] = "STATUS"}
    for _, bitv in ipairs({F_ACK, F_CHUNK, F_PUT, F_CRC, F_STATUS}) do
        if band(flags, bitv) ~= 0 then out[#out + 1] = names[bitv] end
    end
    return table.concat(out, ",")
end

local function dissect_version_reply(tvb, pinfo, tree)
    local n = tvb:len()
    local sub = tree:add(btl, tvb(), "btlcore VERSION reply")
    sub:add(f.version, tvb(0, 1))
    sub:add(f.type, tvb(1, 1))
    sub:add(f.vn_count, tvb(2, 1))
    sub:add(f.reserved, tvb(3, 1))
    sub:add(f.vn_dst, tvb(4, 4))
    sub:add(f.vn_inc, tvb(8, 4))
    local listed = {}
    for i = 12, n - 5 do
        sub:add(f.vn_version, tvb(i, 1))
        listed[#listed + 1] = tostring(tvb(i, 1):uint())
    end
    if n >= 16 then sub:add(f.vn_crc, tvb(n - 4, 4)) end
    pinfo.cols.info:set("VERSION reply: speaks " .. table.concat(listed, ","))
end

local function dissect_ack(tvb, sub, at, plen, ack)
    local body = sub:add(tvb(at, plen), "ACK body")
    body:add(f.window, tvb(at, 4))
    body:add(f.nranges, tvb(at + 4, 1))
    local af = body:add(f.ack_flags, tvb(at + 5, 1))
    af:add(f.af_truncated, tvb(at + 5, 1))
    af:add(f.af_duplicate, tvb(at + 5, 1))
    body:add(f.reserved, tvb(at + 6, 2))
    body:add(f.ack_delay, tvb(at + 8, 4))
    local blocks = {}
    local nr = tvb(at + 4, 1):uint()
    for i = 0, nr - 1 do
        local o = at + 12 + 8 * i
        if o + 8 > at + plen then break end
        local start, length = tvb(o, 4):uint(), tvb(o + 4, 4):uint()
        local left = ack + start
        local right = left + (length - 1)
        local r = body:add(f.sack, tvb(o, 8))
        r:set_text(string.format("SACK block: %s-%s", tostring(left), tostring(right)))
        r:add(f.sack_start, tvb(o, 4))
        r:add(f.sack_length, tvb(o + 4, 4))
        r:add(f.sack_left, tvb(o, 4), left):set_generated()
        r:add(f.sack_right, tvb(o + 4, 4), right):set_generated()
        blocks[#blocks + 1] = tostring(left) .. "-" .. tostring(right)
    end
    local info = " win=" .. tvb(at, 4):uint()
    if #blocks > 0 then info = info .. " SACK=" .. table.concat(blocks, ",") end
    return info
end

local function dissect_params(tvb, body, at, stop)
    while at + 4 <= stop do
        local typ, length = tvb(at, 2):uint(), tvb(at + 2, 2):uint()
        local len_ok = at + 4 + length <= stop
        local t = body:add(f.tp, tvb(at, len_ok and 4 + length or stop - at))
        t:set_text("Transport parameter: " .. (tp_names[typ] or string.format("unknown 0x%04x", typ)))
        t:add(f.tp_type, tvb(at, 2))
        t:add(f.tp_length, tvb(at + 2, 2))
        if not len_ok then return end
        if length > 0 then
            local v = tvb(at + 4, length)
            if typ == 1 and length == 4 then t:add(f.tp_max_datagram, v)
            elseif typ == 2 and length == 4 then t:add(f.tp_max_message, v)
            elseif typ == 3 and length == 4 then t:add(f.tp_peer_timeout, v)
            elseif typ == 4 and length == 8 then t:add(f.tp_window_bytes, v)
            else t:add(f.tp_value, v) end
        end
        at = at + 4 + length
    end
end

local function dissect_hello(tvb, sub, version, at, plen)
    local body = sub:add(tvb(at, plen), "HELLO body")
    body:add(f.hello_incarnation, tvb(at, 4))
    body:add(f.hello_conn, tvb(at + 4, 4))
    body:add(f.hello_isn, tvb(at + 8, 8))
    body:add(f.hello_echo, tvb(at + 16, 4))
    body:add(f.hello_window, tvb(at + 20, 4))
    body:add(f.hello_mad, tvb(at + 24, 4))
    body:add(f.hello_addr_len, tvb(at + 28, 2))
    local alen = tvb(at + 28, 2):uint()
    if alen > 0 and at + 30 + alen <= at + plen then body:add(f.hello_address, tvb(at + 30, alen)) end
    local rest = at + 30 + alen
    if version >= 2 then dissect_params(tvb, body, rest, at + plen) end
    return " conn=" .. tvb(at + 4, 4):uint() .. " isn=" .. tostring(tvb(at + 8, 8):uint64())
end

-- the body of a version-2 control type (CLOSE, notice, CHALLENGE, PING); info text back
local function dissect_control(tvb, sub, typ, at, plen)
    local body = sub:add(tvb(at, plen), type_names[typ] .. " body")
    if typ == T_CLOSE or typ == T_CLOSE_ACK then
        body:add(f.close_conn, tvb(at, 4))
        body:add(f.close_echo, tvb(at + 4, 4))
        body:add(f.close_reason, tvb(at + 8, 2))
        body:add(f.reserved, tvb(at + 10, 2))
        return " reason=" .. (close_reasons[tvb(at + 8, 2):uint()] or "other")
    elseif typ == T_UNKNOWN_CONN then
        body:add(f.notice_echo, tvb(at, 4))
        body:add(f.notice_digest, tvb(at + 4, 4))
        body:add(f.notice_type, tvb(at + 8, 1))
        body:add(f.reserved, tvb(at + 9, 3))
        return " for a " .. (type_names[tvb(at + 8, 1):uint()] or "?")
    elseif typ == T_CHALLENGE or typ == T_RESPONSE then
        body:add(f.nonce, tvb(at, 8))
        return " nonce=0x" .. tvb(at, 8):bytes():tohex()
    end
    body:add(f.reserved, tvb(at, plen))
    return ""
end

-- Retransmission analysis: a DATA segment whose seq was seen before in the same flow (same
-- addresses, ports and dst_conn).  Decided once per frame, the first time it is dissected,
-- and kept by frame number, so that later passes and clicks show the same answer.
local seen_seqs = {}      -- flow key -> {seq string -> first frame number}
local decided = {}        -- frame number -> first frame with that seq, or false (a first transmission)

function btl.init()
    seen_seqs, decided = {}, {}
end

local function analyse(tvb, pinfo, sub)
    local seq = tostring(tvb(16, 8):uint64())
    local first = decided[pinfo.number]
    if first == nil then
        local key = tostring(pinfo.src) .. ":" .. pinfo.src_port .. ">" .. tostring(pinfo.dst) .. ":"
            .. pinfo.dst_port .. "/" .. tvb(4, 4):uint()
        local flow = seen_seqs[key]
        if flow == nil then
            flow = {}
            seen_seqs[key] = flow
        end
        first = flow[seq] or false
        if not first then flow[seq] = pinfo.number end
        decided[pinfo.number] = first
    end
    if not first then return false end  -- (the field is there only on a retransmission, as tcp.analysis's)
    local item = sub:add(f.retransmission, tvb(16, 8), true)
    item:set_generated()
    item:add_proto_expert_info(ex_retransmission, "Retransmission of seq " .. seq)
    sub:add(f.first_frame, tvb(16, 8), first):set_generated()
    return true
end

local function dissect_header(tvb, sub)
    sub:add(f.version, tvb(0, 1))
    sub:add(f.type, tvb(1, 1))
    local fl = sub:add(f.flags, tvb(2, 1))
    fl:append_text(" (" .. flag_names(tvb(2, 1):uint()) .. ")")
    for _, bf in ipairs({f.flag_ack, f.flag_chunk, f.flag_put, f.flag_crc, f.flag_status}) do
        fl:add(bf, tvb(2, 1))
    end
    sub:add(f.hello_flags, tvb(3, 1)):add(f.hf_crc_required, tvb(3, 1))
    sub:add(f.dst_conn, tvb(4, 4))
    sub:add(f.src_incarnation, tvb(8, 4))
    sub:add(f.crc, tvb(12, 4))
    sub:add(f.seq, tvb(16, 8))
    sub:add(f.ack, tvb(24, 8))
    sub:add(f.tag, tvb(32, 2))
    sub:add(f.payload_len, tvb(34, 2))
end

local function check_crc(tvb, pinfo, sub, flags)
    if band(flags, F_CRC) == 0 or not btl.prefs.check_crc then return end
    local want = crc32c(tvb, 16, tvb:len(), crc32c(tvb, 0, 12, 0))
    local ok = tvb(12, 4):uint() == want
    sub:add(f.crc_good, tvb(12, 4), ok):set_generated()
    local bad = sub:add(f.crc_bad, tvb(12, 4), not ok)
    bad:set_generated()
    if not ok then
        bad:add_proto_expert_info(ex_bad_crc, string.format("Bad CRC32C (should be 0x%08x)", want))
        pinfo.cols.info:append(" [BAD CRC]")
    end
end

local function dissect(tvb, pinfo, tree)
    local n, cap = tvb:reported_len(), tvb:len()
    pinfo.cols.protocol = "BTL"
    if cap >= 16 and cap == n and tvb(0, 1):uint() == 0 then
        dissect_version_reply(tvb, pinfo, tree)
        return n
    end
    local sub = tree:add(btl, tvb(), "btlcore")
    if cap < HEADER_LEN then
        sub:add_proto_expert_info(ex_malformed, cap .. " bytes (captured) is shorter than the 36-byte header")
        return cap
    end
    dissect_header(tvb, sub)
    local version, typ, flags = tvb(0, 1):uint(), tvb(1, 1):uint(), tvb(2, 1):uint()
    local name = type_names[typ] or ("type " .. typ)
    local ack = tvb(24, 8):uint64()
    local info = name
    if typ == T_DATA then info = info .. " seq=" .. tostring(tvb(16, 8):uint64()) end
    if band(flags, F_ACK) ~= 0 then info = info .. " ack=" .. tostring(ack) end
    sub:append_text(string.format(", v%d %s", version, info))
    local at = HEADER_LEN
    if band(flags, F_CHUNK) ~= 0 and at + 12 <= cap then
        sub:add(f.msg_id, tvb(at, 4))
        sub:add(f.msg_len, tvb(at + 4, 4))
        sub:add(f.chunk_offset, tvb(at + 8, 4))
        info = info .. " msg=" .. tvb(at, 4):uint() .. " off=" .. tvb(at + 8, 4):uint()
        at = at + 12
    end
    if band(flags, F_PUT) ~= 0 and at + 12 <= cap then
        sub:add(f.put_key, tvb(at, 4))
        sub:add(f.put_offset, tvb(at + 4, 8))
        info = info .. " put=" .. tvb(at, 4):uint()
        at = at + 12
    end
    local plen = tvb(34, 2):uint()
    local truncated = cap < n  -- (the capture cut it short: its body is not all there)
    if n ~= at + plen or not types_by_version[version] or not types_by_version[version][typ]
            or (not truncated and not body_ok(tvb, version, typ, flags, at, plen)) then
        sub:add_proto_expert_info(ex_malformed, string.format(
            "version %d type %d with payload_len %d in %d bytes", version, typ, plen, n))
        pinfo.cols.info:set(info .. " [MALFORMED]")
        return cap
    end
    if truncated then
        if typ == T_DATA and analyse(tvb, pinfo, sub) then info = info .. " [RETRANSMISSION]" end
        pinfo.cols.info:set(info .. " [truncated capture]")
        return cap
    end
    if typ == T_DATA then
        info = info .. " tag=" .. tvb(32, 2):uint() .. " len=" .. plen
        if analyse(tvb, pinfo, sub) then info = info .. " [RETRANSMISSION]" end
        if band(flags, F_STATUS) ~= 0 then
            local body = sub:add(tvb(at, plen), "Put status")
            body:add(f.put_seq, tvb(at, 8))
            body:add(f.put_status, tvb(at + 8, 1))
            body:add(f.reserved, tvb(at + 9, 3))
            info = info .. " put-status=" .. (put_status_names[tvb(at + 8, 1):uint()] or "?")
        elseif plen > 0 then
            sub:add(f.payload, tvb(at, plen))
        end
    elseif typ == T_ACK then
        info = info .. dissect_ack(tvb, sub, at, plen, ack)
    elseif typ == T_HELLO or typ == T_HELLO_ACK then
        info = info .. dissect_hello(tvb, sub, version, at, plen)
    else
        info = info .. dissect_control(tvb, sub, typ, at, plen)
    end
    pinfo.cols.info:set(info)
    check_crc(tvb, pinfo, sub, flags)
    return n
end

function btl.dissector(tvb, pinfo, tree)
    return dissect(tvb, pinfo, tree)
end

local function heuristic(tvb, pinfo, tree)
    if not looks_like_btl(tvb) then return false end
    dissect(tvb, pinfo, tree)
    return true
end

DissectorTable.get("udp.port"):add(WIRE_PORT, btl)
btl:register_heuristic("udp", heuristic)
