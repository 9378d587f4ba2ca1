#[zmesh::service(channel = "pump")]
trait Pump {
    #[query]
    async fn read<T: serde::de::DeserializeOwned>(&self, what: String) -> T;
}

fn main() {}
