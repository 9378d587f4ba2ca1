//! Micro-benchmarks of the wire codec: the hot records (PROBE/ACK, MESSAGE, fanout PUBLISH)
//! encoded and decoded. Run with `cargo bench --bench codec`.

use std::num::NonZeroU64;

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use zmesh::proto::wire::{self, FanoutMessage, Message, Name, Record};

fn codec(c: &mut Criterion) {
    let id = NonZeroU64::new(0x0123_4567_89ab_cdef).unwrap_or(NonZeroU64::MIN);
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode_probe", |b| {
        b.iter(|| wire::encode_probe(black_box(id)))
    });
    let probe = [wire::encode_probe(id).to_vec()];
    g.bench_function("decode_probe", |b| {
        b.iter(|| Record::decode(black_box(&probe)))
    });

    for size in [64usize, 1024] {
        let msg = Record::Message(Message {
            channel: Name::new("orders".to_owned()).expect("valid channel"),
            payload: Bytes::from(vec![7u8; size]),
        });
        g.bench_function(format!("encode_message_{size}"), |b| {
            b.iter(|| black_box(&msg).encode())
        });
        let frames = msg.encode();
        g.bench_function(format!("decode_message_{size}"), |b| {
            b.iter(|| Record::decode(black_box(&frames)))
        });
        let publish = FanoutMessage::Publish {
            topic: Bytes::from_static(b"prices"),
            generation: id,
            seq: 42,
            payload: Bytes::from(vec![7u8; size]),
        };
        let frames = publish.encode().expect("valid publish");
        g.bench_function(format!("decode_publish_{size}"), |b| {
            b.iter(|| FanoutMessage::decode(black_box(&frames)))
        });
    }
    let beacon: Vec<&[u8]> = wire::encode_beacon().to_vec();
    g.bench_function("decode_beacon", |b| {
        b.iter(|| FanoutMessage::decode(black_box(&beacon)))
    });
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
