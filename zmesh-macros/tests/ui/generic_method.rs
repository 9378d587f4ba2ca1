#[zmesh_macros::service(channel = "pump")]
trait Pump {
    #[query]
    async fn read<T: Clone>(&self, what: String) -> T;
}

fn main() {}
