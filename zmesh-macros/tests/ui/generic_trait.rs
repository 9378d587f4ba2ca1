#[zmesh_macros::service(channel = "pump")]
trait Pump<T> {
    #[query]
    async fn pressure(&self) -> T;
}

fn main() {}
